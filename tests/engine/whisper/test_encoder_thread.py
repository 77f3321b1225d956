"""Live passes encoded on the encoder thread beside the decoder (encoder_thread.py): several
streams fed in lockstep get the transcripts they get with the engine thread alone; a stream
aborted while its window encodes ends once and leaves the other streams alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conftest import Clip, wer

STEP_SAMPLES = 8000  # 500 ms: the default WhisperOptions.stream_step_ms
STREAMS = 4


def _engine(threads: int) -> Any:
    from engine import ASREngine, EngineConfig

    return ASREngine(EngineConfig(quantization="none", service_mode="streaming", num_threads=threads))


def _lockstep(engine: Any, audios: list[np.ndarray], abort_at: int | None = None) -> dict[int, list[Any]]:
    """Feed every stream 500 ms a round, one engine step after each stream's chunk, then step
    until idle: a pass sees the same audio however the steps interleave. The last stream (fed
    while the others decode) is aborted, from round `abort_at` on, once its window is on the
    encoder thread. Outputs per stream."""
    rids = [engine.add_streaming_request() for _ in audios]
    outputs: dict[str, list[Any]] = {rid: [] for rid in rids}
    thread = engine.runner.encoder_thread
    aborted = False
    rounds = 0  # rounds fed so far

    def step() -> None:
        nonlocal aborted
        for out in engine.step():
            outputs[out.request_id].append(out)
        encoding = thread is not None and thread.busy and any(j.request_id == rids[-1] for j in engine.runner.planner.encoding)
        if abort_at is not None and rounds > abort_at and not aborted and encoding:
            engine.abort_request(rids[-1])
            aborted = True

    for off in range(0, max(a.size for a in audios), STEP_SAMPLES):
        rounds += 1
        # one stream's chunk, then one engine step: its pass starts while the others' decode
        for rid, audio in zip(rids, audios):
            if off < audio.size and not (outputs[rid] and outputs[rid][-1].finished):
                engine.feed_chunk(rid, audio[off : off + STEP_SAMPLES], is_last=off + STEP_SAMPLES >= audio.size)
                step()
        while engine.has_work():
            step()
    assert abort_at is None or aborted, "the last stream's window was never on the encoder thread"
    return {i: outputs[rid] for i, rid in enumerate(rids)}


@pytest.fixture(scope="module")
def audios(clips: list[Clip]) -> tuple[list[np.ndarray], list[str]]:
    picked = [c for c in clips if c.text and 3.0 <= c.duration <= 8.0][:STREAMS]
    assert len(picked) == STREAMS
    return [c.audio for c in picked], [c.text or "" for c in picked]


def test_streams_encoded_beside_the_decoder_match_the_engine_thread_alone(
    audios: tuple[list[np.ndarray], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = _engine(threads=1)
    assert alone.runner.encoder_thread is None  # one core: the engine thread alternates
    try:
        expected = _lockstep(alone, audios[0])
    finally:
        alone.shutdown()
    beside = _engine(threads=2)
    thread = beside.runner.encoder_thread
    batches: list[int] = []
    start = thread.start
    monkeypatch.setattr(thread, "start", lambda jobs: (batches.append(len(jobs)), start(jobs))[-1])
    try:
        got = _lockstep(beside, audios[0])
    finally:
        beside.shutdown()
    assert batches, "no live pass was encoded on the encoder thread"
    for i in range(STREAMS):
        finals = [o for o in got[i] if o.finished]
        assert len(finals) == 1 and finals[0].finish_reason == "stop", got[i][-1]
        # the same passes over the same audio: the text may differ only where the encoder's
        # thread count changes float rounding
        assert wer([expected[i][-1].text], [finals[0].text]) <= 10.0, (expected[i][-1].text, finals[0].text)
    assert wer(audios[1], [got[i][-1].text for i in range(STREAMS)]) <= 25.0


def test_a_stream_aborted_while_its_window_encodes_ends_once(audios: tuple[list[np.ndarray], list[str]]) -> None:
    engine = _engine(threads=2)
    try:
        got = _lockstep(engine, audios[0], abort_at=4)
        # the engine keeps working: a later stream transcribes normally
        again = _lockstep(engine, audios[0][1:2])
    finally:
        engine.shutdown()
    victim = STREAMS - 1
    terminal = [o for o in got[victim] if o.finished]
    assert len(terminal) == 1 and terminal[0].finish_reason == "abort", got[victim][-1:]
    for i in range(victim):
        finals = [o for o in got[i] if o.finished]
        assert len(finals) == 1 and finals[0].finish_reason == "stop", got[i][-1]
    assert wer(audios[1][:victim], [got[i][-1].text for i in range(victim)]) <= 25.0
    assert again[0][-1].finish_reason == "stop" and wer(audios[1][1:2], [again[0][-1].text]) <= 25.0
