"""A live stream counts as spoken (RunnerStats.streams_spoken, which the server's live gate reads:
app/admission.py) once one of its passes starts over speech the VAD hears or decodes speech, not
while it hears silence, and stays spoken through a pause; a new silent stream beside it is not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conftest import Clip

STEP = 8000  # 500 ms at 16 kHz, the engine's stream step


def _feed(engine: Any, rid: str, audio: np.ndarray, last: bool = False) -> None:
    for start in range(0, audio.size, STEP):
        engine.feed_chunk(rid, audio[start : start + STEP], is_last=last and start + STEP >= audio.size)
        while engine.has_work():
            engine.step()


@pytest.mark.parametrize("quantization", ["none"])
def test_a_stream_is_spoken_after_a_pass_decodes_speech_and_stays_so(clips: list[Clip], quantization: str) -> None:
    from engine import ASREngine, EngineConfig

    speech = next(c for c in clips if c.id == "libri_61-70968-0000").audio
    engine = ASREngine(EngineConfig(service_mode="streaming", quantization=quantization))
    try:
        rid = engine.add_streaming_request()
        _feed(engine, rid, np.zeros(3 * 16000, np.float32))
        stats = engine.runner.stats()
        assert stats.streams == 1 and stats.streams_spoken == 0, "three seconds of silence: no speech decoded"
        _feed(engine, rid, speech)
        assert engine.runner.stats().streams_spoken == 1
        _feed(engine, rid, np.zeros(2 * 16000, np.float32))
        assert engine.runner.stats().streams_spoken == 1, "a pause after speech: still a speaking stream"
        quiet = engine.add_streaming_request()
        _feed(engine, quiet, np.zeros(16000, np.float32))
        assert engine.runner.stats().streams == 2 and engine.runner.stats().streams_spoken == 1
        _feed(engine, rid, np.zeros(0, np.float32), last=True)
        _feed(engine, quiet, np.zeros(0, np.float32), last=True)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("quantization", ["none"])
def test_a_stream_is_spoken_from_the_pass_that_starts_over_speech(clips: list[Clip], quantization: str) -> None:
    """The pass that starts over speech the VAD hears makes the stream spoken, before its text
    returns: the gate's cost line must not lag the passes that already cost what speech costs."""
    from engine import ASREngine, EngineConfig

    speech = next(c for c in clips if c.id == "libri_61-70968-0000").audio
    engine = ASREngine(EngineConfig(service_mode="streaming", quantization=quantization))
    try:
        rid = engine.add_streaming_request()
        _feed(engine, rid, np.zeros(3 * 16000, np.float32))
        assert engine.runner.stats().streams_spoken == 0
        engine.feed_chunk(rid, speech[: 2 * STEP])
        stream = engine.runner.streams[rid]
        while not stream.in_flight and engine.has_work():
            engine.step()
        assert stream.in_flight and not stream.committed_words  # its pass has not returned
        assert engine.runner.stats().streams_spoken == 1, "a pass is decoding speech"
        _feed(engine, rid, np.zeros(0, np.float32), last=True)
    finally:
        engine.shutdown()
