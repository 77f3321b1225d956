"""The silence gate (engine/streaming/silence_gate.py) on the packaged Silero VAD and a real clip:
it hears speech where there is speech and none in silence, whatever the chunking, scores only
the audio after `since`, and streams scored together get what each gets alone."""

from __future__ import annotations

import numpy as np
import pytest

from engine.streaming.silence_gate import SPEECH_PROB, SilenceGate
from engine.vad import SAMPLE_RATE, WINDOW_SAMPLES, speech_probs
from tests.conftest import load_clip

CLIP = "mfa_thoughts"


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return load_clip(CLIP)


def _gate() -> SilenceGate:
    gate = SilenceGate.load()
    assert gate is not None, "the packaged Silero VAD did not load"
    return gate


def test_silence_is_silent_and_the_speech_of_a_clip_is_heard(speech: np.ndarray) -> None:
    gate = _gate()
    room = (np.random.default_rng(0).standard_normal(2 * SAMPLE_RATE) * 1e-3).astype(np.float32)  # quiet room
    audio = np.concatenate([room, speech])
    ends = []
    for fed in range(SAMPLE_RATE // 2, audio.size + 1, SAMPLE_RATE // 2):  # a window growing 0.5 s a call
        ends.append(gate.speech_ends([("a", -1.0, 0.0, audio[:fed])])[0])
    assert ends[:4] == [None] * 4, ends  # the room's two seconds
    heard = [end is not None and end > (i + 0.5) / 2 for i, end in enumerate(ends)]  # speech in that call's audio
    assert sum(heard[4:]) >= len(heard[4:]) // 2, ends  # a clip of speech, with its own room tone at the edges


def test_chunking_and_batch_mates_do_not_change_what_a_stream_hears(speech: np.ndarray) -> None:
    """Whole windows are scored in order whatever the calls' sizes (the rest waits for the next
    call), and each stream keeps its own state in a batched call."""
    audio = np.concatenate([np.zeros(SAMPLE_RATE, np.float32), speech])
    probs = speech_probs(_gate().model, audio)  # one window at a time, from the stream's start
    odd = _gate()
    together = _gate()
    silence = np.zeros(audio.size, np.float32)
    seen = set()
    for fed in range(3001, audio.size, 3001):  # calls that split windows
        whole = fed // WINDOW_SAMPLES
        speech_windows = np.flatnonzero(probs[:whole] > SPEECH_PROB)
        expected = None if speech_windows.size == 0 else (speech_windows[-1] + 1) * WINDOW_SAMPLES / SAMPLE_RATE
        seen.add(expected is None)
        assert odd.speech_ends([("a", 0.0, 0.0, audio[:fed])]) == [expected]
        assert together.speech_ends([("b", 0.0, 0.0, silence[:fed]), ("a", 0.0, 0.0, audio[:fed])]) == [None, expected]
    assert seen == {False, True}  # calls over the leading second of silence, and over speech


def test_only_the_audio_after_since_is_scored(speech: np.ndarray) -> None:
    """A stream is scored from `since` (or its window's start): speech before it is not heard, and
    a stream forgotten (its passes could not be skipped) starts afresh there."""
    pause = np.zeros(2 * SAMPLE_RATE, np.float32)
    audio = np.concatenate([speech, pause])
    gate = _gate()
    probs = speech_probs(gate.model, audio)
    spoken_until = (np.flatnonzero(probs > SPEECH_PROB)[-1] + 1) * WINDOW_SAMPLES / SAMPLE_RATE
    assert 1.0 < spoken_until < speech.size / SAMPLE_RATE  # the clip's room tone follows its speech
    assert gate.speech_ends([("a", 0.0, 0.0, audio)]) == [spoken_until]
    gate.forget("a")
    assert gate.speech_ends([("a", spoken_until + 0.3, 0.0, audio)]) == [None]
    gate.forget("a")
    assert gate.speech_ends([("a", spoken_until - 0.5, 0.0, audio)])[0] is not None  # its last half second
    # a window trimmed to start after the speech: its own start bounds what is scored
    trimmed_at = round((spoken_until + 0.3) * SAMPLE_RATE)
    gate.forget("a")
    assert gate.speech_ends([("a", 0.0, trimmed_at / SAMPLE_RATE, audio[trimmed_at:])]) == [None]
