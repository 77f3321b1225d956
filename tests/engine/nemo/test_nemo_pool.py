"""Must-show 3: streams opened, fed, aborted or finished at random leave the KV pool and the state
slots as they started; every request ends exactly once."""

from __future__ import annotations

import numpy as np

from engine.request import Request
from engine.types import DecodingOptions, RequestOutput
from tests.engine.nemo.conftest import clip, make_runner


def _churn(name: str, total: int, options: dict[str, object], seed: int) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    runner = make_runner(name, max_batch_size=16, family_options={"nemo": {"max_streams": 24, **options}})
    # cache-aware streams keep their attention cache in the paged pool; buffered ones have none
    assert (runner.pool is not None) == (runner.streaming_kind == "cache_aware"), runner.streaming_kind
    initial_blocks = runner.pool.free_ids() if runner.pool else set()
    initial_slots = runner.slots.free_ids()
    speech = np.asarray(clip(name, "libri_61-70968-0000"))
    live: dict[str, tuple[Request, np.ndarray, int]] = {}
    ended: dict[str, str] = {}
    started = 0
    while len(ended) < total:
        while started < total and runner.free_slots() > 0 and len(live) < 40:
            n = int(rng.integers(0, 9600))  # 0 .. 0.6 s: a few chunks each
            start = int(rng.integers(0, len(speech) - n))
            req = Request(f"r{started}", True, DecodingOptions(), 16000)
            assert runner.admit([req]) == []
            live[req.request_id] = (req, speech[start : start + n], 0)
            started += 1
        for rid, (req, audio, fed) in list(live.items()):
            roll = rng.random()
            if roll < 0.02 or (req.input_finished and roll < 0.05):  # client abort / disconnect
                runner.release(req)
                runner.release(req)  # idempotent
                ended[rid] = "abort"
                del live[rid]
                continue
            piece = int(rng.choice([160, 1000, 2560, 6000]))
            req.append_audio(audio[fed : fed + piece])
            live[rid] = (req, audio, fed + piece)
            req.input_finished = fed + piece >= len(audio)
        outputs: list[RequestOutput] = runner.execute()
        for out in outputs:
            assert out.request_id in live, f"output for a request no longer live: {out}"
            if out.finished:
                assert out.finish_reason == "stop", out
                ended[out.request_id] = "stop"
                del live[out.request_id]
        if runner.pool is not None:
            held = sum(len(r.runner_state.ca.table.blocks) for r, _, _ in live.values())  # type: ignore[attr-defined]
            assert runner.pool.num_free + held == runner.pool.num_blocks
        assert runner.slots.num_free + len(live) == runner.slots.num_slots
    if runner.pool is not None:
        assert runner.pool.free_ids() == initial_blocks and runner.pool.num_free == runner.pool.num_blocks
    assert runner.slots.free_ids() == initial_slots
    assert runner.stats().streams == 0
    return ended


def test_500_cache_aware_streams_leave_the_pool_empty() -> None:
    ended = _churn("hybrid_cache_aware", 500, {}, seed=1234)
    reasons = list(ended.values())
    assert reasons.count("stop") > 250 and reasons.count("abort") > 10


def test_buffered_streams_leave_the_state_slots_empty() -> None:
    ended = _churn("unified_rc", 120, {"stream_context": (10, 4, 4)}, seed=99)
    assert set(ended.values()) == {"stop", "abort"}
