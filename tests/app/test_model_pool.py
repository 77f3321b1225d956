"""ModelPool's policy over real EngineServices driving the scripted engine of test_routes: names,
one load for concurrent first requests, LRU unloading under a budget, the idle TTL, and never
unloading a model with a request in flight. The end-to-end twins (real models) are
tests/e2e/test_models*.py."""

from __future__ import annotations

import asyncio
import shutil
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pytest

from app.engine_service import EngineService
from app.metrics import Metrics
from app.model_pool import EMBEDDED_NAME, ModelPool, PooledModel, model_specs, parse_model_entry
from app.requests import ModelNotFound, pick_model
from engine import DecodingOptions, EngineConfig, RequestOutput
from engine.errors import EngineOverloadedError, InvalidRequestError
from tests.app.test_routes import RATE, FakeEngine, canned
from tests.e2e.test_models import NEMO_FIXTURE

KIB = 1024
NAMES = ("a", "b", "c")


def hold_or_answer(request_id: str, audio: np.ndarray, options: DecodingOptions) -> RequestOutput | None:
    """A request of 1 s of audio stays in flight until aborted; others are answered."""
    return None if len(audio) == RATE else canned(request_id, audio, options)


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    """A checkpoint directory per model, its weights 1 KiB each (the pool's size estimate)."""
    out = {}
    for name in NAMES:
        d = tmp_path / name
        d.mkdir()
        (d / "model.bin").write_bytes(b"\0" * KIB)
        (d / "tokenizer.json").write_text("{}")  # not a weight: not counted
        out[name] = str(d)
    return out


@pytest.fixture
def built() -> list[str]:
    return []


@pytest.fixture
async def pools(dirs: dict[str, str], built: list[str]) -> AsyncIterator[Callable[..., ModelPool]]:
    """Makes pools of the three models (`built` records each engine built); closes them after."""
    made: list[ModelPool] = []

    def make(budget_bytes: int = 0, ttl_s: float = -1.0) -> ModelPool:
        metrics = Metrics()

        def make_engine(config: EngineConfig) -> FakeEngine:
            built.append(next(n for n, d in dirs.items() if d == config.ckpt_dir))
            return FakeEngine(answer=hold_or_answer, config=config)

        def make_service(engine: FakeEngine, entry: PooledModel) -> EngineService:
            return EngineService(engine, metrics, 8, engine_label=str(entry.index))  # type: ignore[arg-type]

        specs = model_specs([f"{n}={dirs[n]}" for n in NAMES], EngineConfig(device="cpu"))
        pool = ModelPool(specs, metrics, make_service, several=True, ttl_s=ttl_s, budget_bytes=budget_bytes,
                         make_engine=make_engine)  # type: ignore[arg-type]
        made.append(pool)
        return pool

    yield make
    for pool in made:
        await pool.close()


def states(pool: ModelPool) -> dict[str, str]:
    return {m.name: m.state for m in pool.models}


def test_entries_and_names() -> None:
    assert parse_model_entry("tiny.en") == ("tiny.en", None)  # the embedded checkpoint, no network
    assert parse_model_entry("fast = /models/x") == ("fast", "/models/x")
    assert parse_model_entry(f"w={EMBEDDED_NAME}") == ("w", None)
    with pytest.raises(ValueError, match="listed twice"):
        model_specs(["a=org/x", "a=org/y"], EngineConfig())
    with pytest.raises(InvalidRequestError, match="not a directory"):
        model_specs(["a=./no/such/dir"], EngineConfig())
    names = ["a", "b"]
    assert [pick_model(names, m) for m in (None, "", "whisper-1", "gpt-4o-transcribe", "b")] == ["a"] * 4 + ["b"]
    assert pick_model(names, "served", served_model_name="served") == "a"
    with pytest.raises(ModelNotFound, match="this server serves 'a', 'b'"):
        pick_model(names, "c")
    # one model too: a name no model answers to is refused; the providers' default names are not
    with pytest.raises(ModelNotFound, match="'large-v9' does not exist"):
        pick_model(["a"], "large-v9")
    assert [pick_model(["a"], m) for m in ("gpt-4o-mini-transcribe", "latest_long", "nova-3")] == ["a"] * 3
    with pytest.raises(ModelNotFound):
        pick_model(["a"], "other", served_model_name="served")


async def test_the_first_loads_at_start_the_others_once_on_first_use(pools: Callable[..., ModelPool],
                                                                     built: list[str]) -> None:
    pool = pools()
    await pool.start()
    assert built == ["a"] and states(pool) == {"a": "loaded", "b": "unloaded", "c": "unloaded"}
    first, second = await asyncio.gather(pool.service_for("b"), pool.service_for("b"))
    assert first is second and built == ["a", "b"]  # two first requests, one load
    assert [c["loaded"] for c in pool.cards()] == [True, True, False]
    assert pool.readiness()["models"]["c"] == {"state": "unloaded"}


async def test_lru_unloads_the_least_recently_used_idle_model(pools: Callable[..., ModelPool],
                                                               built: list[str]) -> None:
    pool = pools(budget_bytes=2 * KIB)  # two of the three fit
    await pool.start()
    await pool.service_for("b")
    await pool.service_for("a")  # b is now the least recently used
    await pool.service_for("c")
    assert states(pool) == {"a": "loaded", "b": "unloaded", "c": "loaded"}
    await pool.service_for("b")
    assert states(pool) == {"a": "unloaded", "b": "loaded", "c": "loaded"}
    assert built == ["a", "b", "c", "b"]


async def test_a_model_with_a_request_in_flight_is_never_unloaded(pools: Callable[..., ModelPool]) -> None:
    pool = pools(budget_bytes=KIB)  # one model at a time
    service = await pool.start()
    stream = service.open_request(np.zeros(RATE, dtype=np.float32))  # held in flight
    with pytest.raises(EngineOverloadedError, match="requests in flight"):
        await pool.service_for("b")
    assert states(pool) == {"a": "loaded", "b": "unloaded", "c": "unloaded"}
    assert "requests in flight" in pool.readiness()["models"]["b"]["error"]
    service.close(stream.request_id)  # the request ends: a is idle now
    await pool.service_for("b")
    assert states(pool) == {"a": "unloaded", "b": "loaded", "c": "unloaded"}


async def test_the_ttl_unloads_idle_models_only(pools: Callable[..., ModelPool]) -> None:
    pool = pools(ttl_s=0.0)  # idle at all is idle for long enough
    await pool.start()
    service = await pool.service_for("b")
    permit = service.admission.take(live=True)  # a live session's permit
    await pool.sweep()
    assert states(pool) == {"a": "unloaded", "b": "loaded", "c": "unloaded"}
    assert pool.readiness()["ready"]  # the first model loads again on demand
    permit.release()
    await pool.sweep()
    assert states(pool)["b"] == "unloaded"
    await pool.service_for(None)  # the first model loads again
    assert states(pool)["a"] == "loaded" and pool.default.loads == 2


async def test_unloading_frees_the_model(tmp_path: Path) -> None:
    """Real engines (embedded Whisper, the NeMo fixture) under a budget that fits one: once the
    second is loaded, nothing holds the first one's runner (its weights) any more."""
    shutil.copy(NEMO_FIXTURE, tmp_path / "model.nemo")
    metrics = Metrics()
    specs = model_specs([EMBEDDED_NAME, f"nemo={tmp_path}"], EngineConfig(device="cpu", quantization="none"))
    pool = ModelPool(specs, metrics, lambda engine, entry: EngineService(engine, metrics, engine_label=str(entry.index)),
                     several=True, budget_bytes=1)  # smaller than either: one at a time
    try:
        whisper = weakref.ref((await pool.start()).engine.runner)
        assert whisper() is not None
        await pool.service_for("nemo")
        assert [m.state for m in pool.models] == ["unloaded", "loaded"]
        assert whisper() is None  # freed by reference counting, garbage collection or not
    finally:
        await pool.close()


async def test_models_not_loaded_are_described_from_their_checkpoints(dirs: dict[str, str]) -> None:
    """/v1/models shows what an unloaded model can do: its card is described from its checkpoint's
    configuration at start (no load); one no family recognises has no card until a load says why."""
    from engine.models.fake import write_checkpoint

    metrics = Metrics()
    fake_dir = write_checkpoint(str(Path(dirs["b"]).parent / "fake"), name="tiny-fake")
    specs = model_specs([f"a={dirs['a']}", f"b={fake_dir}", f"c={dirs['c']}"], EngineConfig(device="cpu"))
    pool = ModelPool(specs, metrics, lambda engine, entry: EngineService(engine, metrics, 8),  # type: ignore[arg-type]
                     several=True, make_engine=lambda config: FakeEngine(answer=canned, config=config))  # type: ignore[arg-type]
    try:
        await pool.start()
        cards = {c["id"]: c for c in pool.cards()}
        assert [cards[n]["state"] for n in "abc"] == ["loaded", "unloaded", "unloaded"]
        described = cards["b"]["info"]
        assert described["described"] is True and described["model"] == "tiny-fake" and described["family"] == "fake"
        assert described["capabilities"]["max_beam_size"] == 1 and "kernels" not in described
        assert cards["c"]["info"] is None  # model.bin + tokenizer.json: no family's checkpoint
    finally:
        await pool.close()
