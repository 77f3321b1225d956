"""The models memory budget counts each model's weights and the KV pool its engine planned, over
real WeNet engines (the reference-written tiny checkpoint) served by the real app in process.
Their pools are planned from device memory this test sets (engine.memory; no GPU here): the
budget holds both models' weights but one pool only. With the first model's request in flight
the second's load is refused as over capacity (503 RESOURCE_EXHAUSTED, gRPC RESOURCE_EXHAUSTED,
not UNAVAILABLE); once that request ends the first is unloaded (least recently used) and the
second loads. /v1/models shows each planned pool."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from app.audio.pool import AudioDecoder
from app.engine_service import EngineService
from app.errors import to_api_error
from app.grpc.convert import to_rpc_error
from app.main import create_app
from app.model_pool import ModelPool, model_specs, weight_bytes
from app.settings import Settings
from engine import EngineConfig
from engine.cache.block_pool import ACTIVATION_RESERVE_FLOOR
from engine.errors import EngineOverloadedError
from engine.memory import MIB, DeviceMemory, set_device_memory
from engine.models.wenet.runner import MAX_BLOCKS_PER_SEQ
from engine.models.wenet.testing import CheckpointSpec, write_checkpoint
from tests.app.test_routes import wav

GIB = 1024 * MIB
BATCH = 4
CHUNK = 8  # encoder frames per chunk = per KV block


@pytest.fixture
def device() -> Iterator[DeviceMemory]:
    """2 GiB, 300 MiB resident: room for far more than the pools' cap."""
    facts = DeviceMemory(total_bytes=2 * GIB, free_bytes=2 * GIB - 300 * MIB)
    previous = set_device_memory(facts)
    yield facts
    set_device_memory(previous)


def wenet_dir(path: Path) -> str:
    ckpt = write_checkpoint(str(path), CheckpointSpec())
    # experiment-dir layout: a lone .pt would be claimed by the Whisper family's detection
    shutil.copy(os.path.join(ckpt, "final.pt"), os.path.join(ckpt, "avg.pt"))
    return ckpt


@pytest.fixture
async def served(tmp_path: Path, device: DeviceMemory) -> AsyncIterator[tuple[httpx.AsyncClient, ModelPool, int]]:
    """The app over a pool of two WeNet models whose budget fits both weights and 1.5 pools;
    yields the client, the pool and one planned pool's bytes."""
    dirs = {name: wenet_dir(tmp_path / name) for name in "ab"}
    pool_bytes = BATCH * MAX_BLOCKS_PER_SEQ * block_bytes()
    budget = weight_bytes(dirs["a"]) + weight_bytes(dirs["b"]) + pool_bytes * 3 // 2
    app = create_app(Settings(grpc_port=0))  # no lifespan under ASGITransport: the parts are put in place
    metrics = app.state.metrics
    base = EngineConfig(device="cpu", max_batch_size=BATCH, chunk_size=CHUNK)
    pool = ModelPool(model_specs([f"{n}={d}" for n, d in dirs.items()], base), metrics,
                     lambda engine, entry: EngineService(engine, metrics, 8, engine_label=str(entry.index)),
                     several=True, budget_bytes=budget)  # fmt: skip
    app.state.models = pool
    app.state.decoder = AudioDecoder(1)
    await pool.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://oasr") as client:
            yield client, pool, pool_bytes
    finally:
        app.state.decoder.close()
        await pool.close()


def block_bytes() -> int:
    """K and V of every layer for one block of CHUNK frames, float32, from the checkpoint's sizes."""
    spec = CheckpointSpec()
    return 2 * spec.num_blocks * spec.output_size * 4 * CHUNK


async def listed(client: httpx.AsyncClient) -> dict[str, dict]:
    response = await client.get("/v1/models")
    assert response.status_code == 200, response.text
    return {m["id"]: m for m in response.json()["data"]}


async def test_the_planned_pool_is_listed_and_counted_beside_the_weights(served) -> None:
    client, pool, pool_bytes = served
    a = (await listed(client))["a"]
    # 0.9 x 2 GiB - 300 MiB resident - the reserve is far above the cap: the cap is planned
    assert int(2 * GIB * 0.9) - 300 * MIB - ACTIVATION_RESERVE_FLOOR > pool_bytes
    assert a["info"]["kv_blocks"] == a["info"]["kv_blocks_cap"] == BATCH * MAX_BLOCKS_PER_SEQ
    assert a["info"]["kv_pool_bytes"] == pool_bytes
    assert a["memory_mib"] == round((pool.models[0].size_bytes + pool_bytes) / MIB, 1) > a["size_mib"]


async def test_a_second_pool_that_does_not_fit_is_refused_as_resource_exhausted(served) -> None:
    client, pool, pool_bytes = served
    a = pool.models[0].service
    assert a is not None
    permit = a.admission.take()  # a request of a's in flight: a cannot be unloaded
    response = await client.post("/v1/audio/transcriptions", data={"model": "b"},
                                 files={"file": ("a.wav", wav(), "audio/wav")})
    assert response.status_code == 503, response.text
    message = response.json()["error"]["message"]
    assert "does not fit the models memory budget" in message and "MiB of KV pool" in message
    states = {m["id"]: m["state"] for m in (await listed(client)).values()}
    assert states == {"a": "loaded", "b": "unloaded"}  # refused for room: retryable, not failed

    refused = pool.models[1].error
    assert refused is not None and refused.startswith("EngineOverloadedError")
    exc = EngineOverloadedError(refused.split(": ", 1)[1])  # the same refusal, as each surface answers it
    assert to_api_error(exc).google_body()["error"] == {"code": 503, "status": "RESOURCE_EXHAUSTED",
                                                        "message": exc.args[0]}
    assert to_rpc_error(exc, draining=False).code == grpc.StatusCode.RESOURCE_EXHAUSTED

    permit.release()  # a's request ends: a is idle, the least recently used, and makes room
    response = await client.post("/v1/audio/transcriptions", data={"model": "b"},
                                 files={"file": ("a.wav", wav(), "audio/wav")})
    assert response.status_code == 200, response.text
    models = await listed(client)
    assert {n: m["state"] for n, m in models.items()} == {"a": "unloaded", "b": "loaded"}
    assert models["b"]["info"]["kv_pool_bytes"] == pool_bytes
