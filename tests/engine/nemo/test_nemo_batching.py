"""Must-show 2: streams batched together get exactly the tokens each gets alone (which are NeMo's).

Streams start at different engine steps and feed different piece sizes, so every batch mixes
first chunks, steady chunks and last partial chunks (cache-aware) or warm-up, steady and last
windows of different presets (buffered)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.models.nemo.runner import NemoRunner
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput
from tests.engine.nemo.conftest import clip, make_runner, reference

PIECES = (640, 1111, 1600, 2560, 4000)


def _drive_together(
    runner: NemoRunner, audios: list[np.ndarray], options: list[DecodingOptions]
) -> tuple[dict[str, RequestOutput], int]:
    """Stream i starts at step i and feeds PIECES[i % 5] samples per step. Returns the final output
    of each stream and the most streams one step advanced together."""
    reqs = [Request(f"s{i}", True, opt, runner.sample_rate) for i, opt in enumerate(options)]
    fed = [0] * len(reqs)
    finals: dict[str, RequestOutput] = {}
    widest, step = 0, 0
    while len(finals) < len(reqs):
        if step < len(reqs):
            assert runner.admit([reqs[step]]) == []
        for i, req in enumerate(reqs[: step + 1]):
            if req.input_finished:
                continue
            piece = PIECES[i % len(PIECES)]
            req.append_audio(audios[i][fed[i] : fed[i] + piece])
            fed[i] += piece
            req.input_finished = fed[i] >= len(audios[i])
        for out in runner.execute():
            assert out.request_id not in finals, "a second terminal output"
            if out.finished:
                finals[out.request_id] = out
        widest = max(widest, runner.streams_stepped)
        step += 1
    return finals, widest


@pytest.mark.parametrize(("streams", "head"), [(2, "rnnt"), (16, "rnnt"), (16, "ctc")])
def test_cache_aware_batched_equals_alone(streams: int, head: str) -> None:
    cases = [
        c
        for c in reference("hybrid_cache_aware")["cache_aware"]
        if c["look_ahead"] == [12, 3] and c["head"] == head
    ]
    runner = make_runner("hybrid_cache_aware", decode_method=head)
    picked = [cases[i % len(cases)] for i in range(streams)]
    finals, widest = _drive_together(runner, [clip("hybrid_cache_aware", c["clip"]) for c in picked],
                                     [DecodingOptions()] * streams)  # fmt: skip
    assert widest >= 2, "the streams never shared a step"
    for i, case in enumerate(picked):
        assert finals[f"s{i}"].finish_reason == "stop"
        assert finals[f"s{i}"].tokens == case["tokens"], f"stream {i} ({case['clip']})"
    assert runner.pool is not None and runner.pool.num_free == runner.pool.num_blocks


def test_buffered_batched_equals_alone_with_mixed_presets() -> None:
    cases = reference("unified_rc")["buffered"]
    runner = make_runner("unified_rc")
    picked = [cases[(5 * i) % len(cases)] for i in range(16)]
    options = [DecodingOptions(stream_context=tuple(c["preset"])) for c in picked]
    finals, widest = _drive_together(runner, [clip("unified_rc", c["clip"]) for c in picked], options)
    assert widest > 4
    for i, case in enumerate(picked):
        assert finals[f"s{i}"].tokens == case["tokens"], f"stream {i} ({case['preset']}, {case['clip']})"
    assert runner.slots.num_free == runner.slots.num_slots


def test_offline_batch_equals_alone() -> None:
    runner = make_runner("tdt", service_mode="offline")
    clips = list(reference("tdt")["offline"])
    reqs = [Request(f"o{i}", False, DecodingOptions(), 16000, audio=np.asarray(clip("tdt", c)))
            for i, c in enumerate(clips)]  # fmt: skip
    assert runner.admit(reqs) == []
    outs = {o.request_id: o for o in runner.execute()}
    for i, c in enumerate(clips):
        assert outs[f"o{i}"].tokens == reference("tdt")["offline"][c]["rnnt"]["tokens"]
