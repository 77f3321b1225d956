"""The silence gate (engine/streaming/silence_gate.py) on the packaged Silero VAD and a real clip:
it hears speech where there is speech and none in silence, whatever the chunking, and streams
scored together get what each gets alone."""

from __future__ import annotations

import numpy as np
import pytest

from engine.streaming.silence_gate import SilenceGate
from engine.vad import SAMPLE_RATE
from tests.conftest import load_clip

CLIP = "mfa_thoughts"


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return load_clip(CLIP)


def _gate() -> SilenceGate:
    gate = SilenceGate.load()
    assert gate is not None, "the packaged Silero VAD did not load"
    return gate


def _chunks(audio: np.ndarray, size: int) -> list[np.ndarray]:
    return [audio[i : i + size] for i in range(0, audio.size, size)]


def test_silence_is_silent_and_the_speech_of_a_clip_is_heard(speech: np.ndarray) -> None:
    gate = _gate()
    rng = np.random.default_rng(0)
    room = (rng.standard_normal(2 * SAMPLE_RATE) * 1e-3).astype(np.float32)  # quiet room noise
    assert gate.speech_ends([("a", room[:SAMPLE_RATE])]) == [None]
    assert gate.speech_ends([("a", room[SAMPLE_RATE:])]) == [None]
    ends = [gate.speech_ends([("a", chunk)])[0] for chunk in _chunks(speech, SAMPLE_RATE // 2)]
    fed = [2 + (i + 1) / 2 for i in range(len(ends))]  # seconds fed after each chunk
    heard = [end is not None and end > at - 0.5 for end, at in zip(ends, fed)]  # speech in that chunk
    assert sum(heard) >= len(heard) // 2, ends  # a clip of speech, with its own room tone at the edges
    assert all(end is None or at - 0.5 < end <= at for end, at, h in zip(ends, fed, heard) if h)


def test_chunking_and_batch_mates_do_not_change_what_a_stream_hears(speech: np.ndarray) -> None:
    """Whole windows are scored in order whatever the chunk sizes (the rest waits for the next
    audio), and each stream keeps its own state in a batched call."""
    audio = np.concatenate([np.zeros(SAMPLE_RATE, np.float32), speech])
    alone = _gate()
    per_window = [alone.speech_ends([("a", w)])[0] == (i + 1) * 512 / SAMPLE_RATE
                  for i, w in enumerate(_chunks(audio, 512))]
    odd = _gate()
    together = _gate()
    silence = np.zeros(audio.size, np.float32)
    seen = set()
    for start in range(0, audio.size, 3001):  # chunks that split windows
        chunk = audio[start : start + 3001]
        completed = per_window[start // 512 : (start + chunk.size) // 512]  # the windows this chunk completes
        last = max((i for i, w in enumerate(per_window[: (start + chunk.size) // 512]) if w), default=None)
        expected = None if last is None else (last + 1) * 512 / SAMPLE_RATE  # where the last speech window ends
        seen.add(any(completed))
        assert odd.speech_ends([("a", chunk)]) == [expected]
        assert together.speech_ends([("b", silence[start : start + 3001]), ("a", chunk)]) == [None, expected]
    assert seen == {False, True}  # chunks of the leading second of silence, and of speech
