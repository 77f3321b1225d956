"""Must-show 4: the paged KV pool under churn, exhaustion and the per-stream ceiling."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest
import torch

from engine.errors import InvalidRequestError
from engine.models.wenet.runner import WenetRunner
from engine.models.wenet.testing import drive_alone, record_log_probs
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput
from tests.conftest import load_clip


def test_thousand_streams_leave_the_pool_as_it_started(make_runner: Callable[..., WenetRunner]) -> None:
    """Random lengths (some shorter than one window, some empty), random piece sizes, aborts
    mid-stream and after the last chunk, more live streams than the pool holds: every request
    ends exactly once and every block comes back."""
    rng = np.random.default_rng(1234)
    runner = make_runner(chunk_size=8, max_num_blocks=48, max_batch_size=32)
    initial = runner.pool.free_ids()
    noise = (rng.standard_normal(16000 * 2) * 0.05).astype(np.float32)
    total, max_live = 1000, 40
    live: dict[str, tuple[Request, np.ndarray, int]] = {}  # id -> (request, audio, samples fed)
    ended: dict[str, str] = {}
    started = 0
    while len(ended) < total:
        while started < total and len(live) < max_live and runner.free_slots() > 0:
            n = int(rng.integers(0, 19200))  # 0 .. 1.2 s
            req = Request(f"r{started}", True, DecodingOptions(beam_size=int(rng.choice([1, 2]))), 16000)
            assert runner.admit([req]) == []
            live[req.request_id] = (req, noise[(s := int(rng.integers(0, 12800))) : s + n], 0)
            started += 1
        for rid, (req, audio, fed) in list(live.items()):
            roll = rng.random()
            if roll < 0.01 or (req.input_finished and roll < 0.03):  # client abort / disconnect
                runner.release(req)
                runner.release(req)  # idempotent
                ended[rid] = "abort"
                del live[rid]
                continue
            piece = int(rng.choice([160, 1600, 4000, 10240]))
            req.append_audio(audio[fed : fed + piece])
            live[rid] = (req, audio, fed + piece)
            if fed + piece >= len(audio):
                req.input_finished = True
        outputs: list[RequestOutput] = runner.execute()
        for out in outputs:
            assert out.request_id in live, f"output for a request no longer live: {out}"
            if out.finished:
                assert out.finish_reason in ("stop", "length"), out
                ended[out.request_id] = out.finish_reason
                del live[out.request_id]
        assert runner.pool.num_free + sum(len(r.runner_state.table.blocks) for r, _, _ in live.values()) == 48
    assert runner.pool.free_ids() == initial and runner.pool.num_free == runner.pool.num_blocks
    assert runner.stats().streams == 0
    reasons = list(ended.values())
    assert reasons.count("stop") > 500 and reasons.count("abort") > 0
    # 40 live streams of up to 4 blocks each overrun 48 blocks: exhaustion happened and was counted
    assert reasons.count("length") == runner.stats().kv_exhausted_total > 0


def test_stream_ceiling_finishes_with_length(make_runner: Callable[..., WenetRunner]) -> None:
    runner = make_runner(chunk_size=4, family_options={"wenet": {"max_stream_blocks": 3}})
    outs = drive_alone(runner, load_clip("libri_61-70968-0000"), 1600)
    final = outs[-1]
    assert final.finish_reason == "length" and final.tokens  # what was decoded is kept
    assert [o.finished for o in outs].count(True) == 1
    assert runner.stats().kv_exhausted_total == 1
    assert runner.pool.num_free == runner.pool.num_blocks


def test_stream_ceiling_recycles_oldest_history(make_runner: Callable[..., WenetRunner]) -> None:
    """With recycling, a 3-block ceiling keeps the last 2 chunks of history: exactly what
    num_left_chunks=2 attends to, so both give the same log-probs."""
    audio = load_clip("libri_61-70968-0000")
    runner = make_runner(chunk_size=4, family_options={"wenet": {"max_stream_blocks": 3,
                                                                 "recycle_streaming_history": True}})
    seen = record_log_probs(runner)
    outs = drive_alone(runner, audio, 1600)
    assert outs[-1].finish_reason == "stop"
    stats = runner.stats()
    assert stats.kv_exhausted_total == 1 and stats.kv_recycled_blocks_total > 20
    window = make_runner(chunk_size=4, num_left_chunks=2)
    window_seen = record_log_probs(window)
    drive_alone(window, audio, 1600)
    assert (torch.cat(seen["alone"]) - torch.cat(window_seen["alone"])).abs().max().item() <= 1e-4


@pytest.mark.parametrize("recycle", [False, True])
def test_exhausting_the_whole_pool(make_runner: Callable[..., WenetRunner], recycle: bool) -> None:
    audio = load_clip("libri_61-70968-0000")[:32000]
    runner = make_runner(chunk_size=4, max_num_blocks=6, family_options={"wenet": {"recycle_streaming_history": recycle}})
    reqs = [Request(f"s{i}", True, DecodingOptions(), 16000) for i in range(3)]
    assert runner.admit(reqs) == []
    assert runner.free_slots() == 3
    for req in reqs:
        req.append_audio(audio)
        req.input_finished = True
    finals = {}
    while runner.has_work():
        finals.update({o.request_id: o.finish_reason for o in runner.execute() if o.finished})
    assert len(finals) == 3
    assert set(finals.values()) == ({"stop"} if recycle else {"length"})
    assert runner.stats().kv_exhausted_total == 3
    assert runner.pool.num_free == 6


def test_admission_beyond_capacity_is_refused(make_runner: Callable[..., WenetRunner]) -> None:
    runner = make_runner(chunk_size=4, max_num_blocks=2)
    assert runner.free_slots() == 2
    first = [Request(f"a{i}", True, DecodingOptions(), 16000) for i in range(2)]
    assert runner.admit(first) == []
    assert runner.free_slots() == 0
    refused = runner.admit([Request("late", True, DecodingOptions(), 16000)])
    assert refused[0].finish_reason == "error" and refused[0].error_stage == "admission"
    for req in first:
        runner.release(req)
    assert runner.pool.num_free == 2 and runner.free_slots() == 2


def test_capacity_from_byte_budget_is_logged(make_runner: Callable[..., WenetRunner], caplog) -> None:
    caplog.set_level(logging.INFO, logger="engine.cache.block_pool")
    runner = make_runner(chunk_size=8, max_num_blocks=None, cpu_cache_bytes=1 << 20)
    cfg = runner.ckpt.config
    block_bytes = 2 * cfg.num_blocks * cfg.output_size * 4 * 8  # K+V x layers x d x fp32 x frames
    assert runner.pool.num_blocks == (1 << 20) // block_bytes
    assert f"= {runner.pool.num_blocks} blocks" in caplog.text and "cpu_cache_bytes=1048576" in caplog.text


def test_pool_too_small_for_one_stream_names_the_levers(make_runner: Callable[..., WenetRunner]) -> None:
    with pytest.raises(
        InvalidRequestError, match="max_num_blocks, cpu_cache_bytes or gpu_memory_utilization"
    ):
        make_runner(chunk_size=8, num_left_chunks=4, max_num_blocks=3)
    with pytest.raises(InvalidRequestError, match="cpu_cache_bytes"):
        make_runner(chunk_size=8, max_num_blocks=None, cpu_cache_bytes=1000)


def test_bad_audio_fails_only_its_own_stream(make_runner: Callable[..., WenetRunner]) -> None:
    runner = make_runner(chunk_size=4)
    good, bad = (
        Request("good", True, DecodingOptions(), 16000),
        Request("bad", True, DecodingOptions(), 16000),
    )
    assert runner.admit([good, bad]) == []
    audio = load_clip("mfa_thoughts")
    good.append_audio(audio)
    good.input_finished = True
    bad.append_audio(np.zeros((1600, 2), dtype=np.float32))  # stereo slipped past the edge
    outs = runner.execute()
    errors = [o for o in outs if o.finished]
    assert [(o.request_id, o.finish_reason, o.error_stage) for o in errors] == [("bad", "error", "features")]
    assert "mono" in (errors[0].error or "")
    while runner.has_work():
        outs += runner.execute()
    assert outs[-1].request_id == "good" and outs[-1].finish_reason == "stop"
    assert runner.pool.num_free == runner.pool.num_blocks


def test_stream_ceiling_below_one_chunk_is_refused(make_runner: Callable[..., WenetRunner]) -> None:
    with pytest.raises(InvalidRequestError, match="max_stream_blocks=1 cannot hold one chunk"):
        make_runner(chunk_size=8, block_size_frames=4, family_options={"wenet": {"max_stream_blocks": 1}})


def test_the_deprecated_engine_config_name_still_works_with_a_warning(make_runner: Callable[..., WenetRunner]) -> None:
    """EngineConfig.recycle_streaming_history moved to the WeNet options; the old name is an alias
    for one release, and the family's own entry wins over it."""
    with pytest.warns(DeprecationWarning, match=r"family_options\['wenet'\]\['recycle_streaming_history'\]"):
        runner = make_runner(chunk_size=4, recycle_streaming_history=True)
    assert runner.options.recycle_streaming_history is True
    with pytest.warns(DeprecationWarning):
        runner = make_runner(chunk_size=4, recycle_streaming_history=True,
                             family_options={"wenet": {"recycle_streaming_history": False}})
    assert runner.options.recycle_streaming_history is False
    assert make_runner(chunk_size=4).options.recycle_streaming_history is False


def test_the_deprecated_max_stream_blocks_name_still_caps_a_stream(make_runner: Callable[..., WenetRunner]) -> None:
    """EngineConfig.max_stream_blocks moved to the WeNet options too; the family's entry wins."""
    with pytest.warns(DeprecationWarning, match=r"family_options\['wenet'\]\['max_stream_blocks'\]"):
        assert make_runner(chunk_size=4, max_stream_blocks=3).stream_ceiling == 3
    with pytest.warns(DeprecationWarning):
        runner = make_runner(chunk_size=4, max_stream_blocks=3, family_options={"wenet": {"max_stream_blocks": 5}})
    assert runner.stream_ceiling == 5
    assert make_runner(chunk_size=4).stream_ceiling == runner.pool.num_blocks
