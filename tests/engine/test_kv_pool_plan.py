"""KV pools sized as the reference design's §6.1 says: the device's total times
gpu_memory_utilization, less what is resident and an activation reserve, divided by a block's
bytes and capped at what max_batch_size sequences can use. The device's memory comes from
engine.memory, which these tests set (no GPU here); the runners are the real WeNet and
speech-LLM ones over their reference-written tiny checkpoints."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from engine.cache import KVSpec, plan_pool
from engine.cache.block_pool import ACTIVATION_RESERVE_FLOOR
from engine.config import EngineConfig
from engine.errors import EngineOverloadedError, InvalidRequestError
from engine.families import family_options
from engine.memory import MIB, DeviceMemory, device_memory, set_device_memory
from engine.models.wenet import FAMILY
from engine.models.wenet.runner import MAX_BLOCKS_PER_SEQ, WenetRunner
from engine.models.wenet.testing import CheckpointSpec, write_checkpoint

GIB = 1024 * MIB
SPEC = KVSpec(num_layers=4, num_heads=4, head_dim=64, dtype=torch.float16)
BLOCK = 16  # frames per block
BLOCK_BYTES = 2 * 4 * 4 * 64 * 2 * BLOCK  # K and V x layers x heads x dims x fp16 x frames = 64 KiB
CPU = torch.device("cpu")
SPEECHLLM = Path(__file__).resolve().parents[1] / "fixtures" / "speechllm" / "qwen2_audio"


@pytest.fixture
def device() -> Iterator[Callable[[DeviceMemory | None], None]]:
    """Sets the device's memory facts for the test; the driver's reading is restored after."""
    previous = set_device_memory(None)
    yield lambda facts: set_device_memory(facts)
    set_device_memory(previous)


def plan(**overrides: object) -> int:
    args: dict[str, object] = {"min_blocks": 2, "blocks_per_seq": 100, "sequences": 8, "max_num_blocks": None,
                               "device": CPU, "gpu_memory_utilization": 0.9, "cpu_cache_bytes": 256 * MIB}
    args.update(overrides)
    return plan_pool(SPEC, BLOCK, **args).num_blocks  # type: ignore[arg-type]


def test_the_pool_gets_the_utilised_total_less_resident_and_the_activation_reserve(device) -> None:
    device(DeviceMemory(total_bytes=1 * GIB, free_bytes=640 * MIB))  # 384 MiB resident
    available = int(1 * GIB * 0.5) - 384 * MIB - ACTIVATION_RESERVE_FLOOR  # 512 - 384 - 256 < 0
    assert available < 0
    with pytest.raises(EngineOverloadedError, match=r"resident=384 MiB activation_reserve=256 MiB"):
        plan(gpu_memory_utilization=0.5)
    # 0.9 x 1024 = 921.6 MiB: 921.6 - 384 - 256 = 281.6 MiB -> 4505 blocks of 64 KiB, under the cap
    expected = (int(1 * GIB * 0.9) - 384 * MIB - ACTIVATION_RESERVE_FLOOR) // BLOCK_BYTES
    assert plan(blocks_per_seq=10_000) == expected == 4505
    # more resident (another model loaded): fewer blocks, by exactly its bytes
    device(DeviceMemory(total_bytes=1 * GIB, free_bytes=640 * MIB - 64 * MIB))
    assert plan(blocks_per_seq=10_000) == expected - 64 * MIB // BLOCK_BYTES


def test_a_derived_pool_stops_at_what_its_sequences_can_use(device) -> None:
    device(DeviceMemory(total_bytes=80 * GIB, free_bytes=79 * GIB))  # room for a million blocks
    assert plan(sequences=8, blocks_per_seq=100) == 800
    assert plan(sequences=32, blocks_per_seq=7) == 224


def test_an_explicit_size_is_taken_as_is_and_the_cpu_takes_its_byte_budget(device) -> None:
    device(DeviceMemory(total_bytes=1 * GIB, free_bytes=0))  # full: ignored when the size is given
    assert plan(max_num_blocks=3) == 3
    device(None)  # the driver: nothing to measure on the CPU
    assert device_memory(CPU) is None
    assert plan(cpu_cache_bytes=100 * BLOCK_BYTES) == 100
    assert plan(cpu_cache_bytes=10_000 * BLOCK_BYTES, sequences=8, blocks_per_seq=100) == 800  # capped there too
    with pytest.raises(InvalidRequestError, match="raise max_num_blocks, cpu_cache_bytes"):
        plan(cpu_cache_bytes=BLOCK_BYTES)  # the configuration's choice, not a full device


@pytest.fixture(scope="module")
def wenet_ckpt(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_checkpoint(str(tmp_path_factory.mktemp("wenet-plan") / "tiny"), CheckpointSpec())


def wenet_runner(ckpt: str, **overrides: object) -> WenetRunner:
    config = EngineConfig(ckpt_dir=ckpt, service_mode="streaming", device="cpu", **overrides)  # type: ignore[arg-type]
    return WenetRunner.from_config(config, family_options(FAMILY, config.family_options, None))


def test_the_wenet_runner_plans_from_the_device_and_reports_it(device, wenet_ckpt: str, caplog) -> None:
    caplog.set_level(logging.INFO, logger="engine.cache.block_pool")
    device(DeviceMemory(total_bytes=2 * GIB, free_bytes=2 * GIB - 300 * MIB))
    runner = wenet_runner(wenet_ckpt, max_batch_size=4, chunk_size=8)
    cfg = runner.ckpt.config
    block_bytes = 2 * cfg.num_blocks * cfg.output_size * 4 * 8  # K+V x layers x d x fp32 x 8 frames
    derived = (int(2 * GIB * 0.9) - 300 * MIB - ACTIVATION_RESERVE_FLOOR) // block_bytes
    cap = 4 * MAX_BLOCKS_PER_SEQ  # unlimited history: the block-table width per stream
    assert runner.pool.num_blocks == min(derived, cap) == cap  # a tiny model: the cap binds
    details = runner.info().details
    assert details["kv_blocks"] == cap and details["kv_blocks_cap"] == cap
    assert details["kv_pool_bytes"] == cap * block_bytes == runner.pool.k.nbytes + runner.pool.v.nbytes
    assert "resident=300 MiB activation_reserve=256 MiB" in caplog.text

    # a sliding window: a stream never holds more than its window, so the cap is the windows
    windowed = wenet_runner(wenet_ckpt, max_batch_size=4, chunk_size=8, num_left_chunks=2)
    assert windowed.pool.num_blocks == 4 * (8 * 3 // 8 + 1)

    # most of the device held elsewhere: the derived pool, below the cap
    device(DeviceMemory(total_bytes=2 * GIB, free_bytes=2 * GIB - 1580 * MIB))
    tight = wenet_runner(wenet_ckpt, max_batch_size=4, chunk_size=8)
    assert tight.pool.num_blocks == (int(2 * GIB * 0.9) - 1580 * MIB - ACTIVATION_RESERVE_FLOOR) // block_bytes < cap


def test_a_full_device_refuses_the_runner_as_overloaded(device, wenet_ckpt: str) -> None:
    device(DeviceMemory(total_bytes=2 * GIB, free_bytes=100 * MIB))
    with pytest.raises(EngineOverloadedError, match="the device's memory is taken"):
        wenet_runner(wenet_ckpt)


def test_the_speech_llm_pool_is_capped_at_its_decoder_rows(device) -> None:
    from engine.models.speechllm.runner import SpeechLLMRunner

    device(DeviceMemory(total_bytes=80 * GIB, free_bytes=80 * GIB))
    runner = SpeechLLMRunner.from_config(EngineConfig(ckpt_dir=str(SPEECHLLM), device="cpu", max_decode_rows=3))
    assert runner.pool.num_blocks == 3 * runner.typical_blocks
    assert runner.info().details["kv_blocks"] == runner.pool.num_blocks
