"""Speech coverage bookkeeping (engine/models/whisper/coverage.py) with the packaged Silero VAD on
a real clip placed in digital silence: speech no word covers is found where the clip is, gets one
more decode, and only one, and what stays without words is counted."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conftest import Clip

LEAD_S = 2.0  # silence before the clip
TAIL_S = 2.0  # and after it


@pytest.fixture(scope="module")
def vad() -> Any:
    from engine.vad.silero import SileroVAD

    return SileroVAD.load()


@pytest.fixture(scope="module")
def placed(clips: list[Clip]) -> tuple[np.ndarray, float]:
    """A clip between LEAD_S and TAIL_S of zeros, and the clip's end (s)."""
    clip = next(c for c in clips if c.id == "mfa_thoughts")
    audio = np.concatenate([np.zeros(int(LEAD_S * 16000), np.float32), clip.audio,
                            np.zeros(int(TAIL_S * 16000), np.float32)])
    return audio, LEAD_S + clip.audio.size / 16000


def test_speech_runs_lie_inside_the_clip_and_cover_most_of_it(vad: Any, placed: tuple[np.ndarray, float]) -> None:
    from engine.models.whisper.coverage import speech_runs

    audio, clip_end = placed
    runs = speech_runs(vad, audio, 0.0, audio.size / 16000)
    assert runs and runs[0][0] >= LEAD_S and runs[-1][1] <= clip_end, runs
    assert sum(e - s for s, e in runs) >= 1.0, runs  # "i have a thousand thoughts about that thing"
    offset = speech_runs(vad, audio[16000:], 1.0, audio.size / 16000, offset_s=1.0)
    flat = [t for run in runs for t in run]
    assert [t for run in offset for t in run] == pytest.approx(flat, abs=0.07), (offset, runs)  # stream time, wherever the buffer starts


def test_uncovered_speech_is_decoded_again_once_then_counted_uncovered(vad: Any, placed: tuple[np.ndarray, float]) -> None:
    from engine.models.whisper.coverage import RETRY_LEAD_S, SpeechCoverage, speech_runs

    audio, _ = placed
    end = audio.size / 16000
    coverage = SpeechCoverage(vad)
    # text ended before the clip: the clip is speech no word covers
    first = coverage.review(audio, 0.5, end)
    assert first.retry_from == 0.5 and first.recovered_s > 1.0 and first.uncovered_s == 0.0, first
    # the retry wrote nothing again: that speech is not retried a second time, it is counted
    second = coverage.review(audio, 0.5, end, wrote_nothing=True)
    assert second.retry_from is None and second.uncovered_s == pytest.approx(first.recovered_s, abs=0.1), second
    assert coverage.recovered_s == first.recovered_s and coverage.uncovered_s == second.uncovered_s
    # a fresh request whose window wrote nothing restarts just before the speech, not at its own start
    fresh = SpeechCoverage(vad).review(audio, 0.0, end, wrote_nothing=True)
    speech_start = speech_runs(vad, audio, 0.0, end)[0][0]
    assert fresh.retry_from == pytest.approx(speech_start - RETRY_LEAD_S), fresh


def test_text_that_runs_to_the_speech_end_or_silence_costs_no_decode(vad: Any, placed: tuple[np.ndarray, float]) -> None:
    from engine.models.whisper.coverage import SpeechCoverage

    audio, clip_end = placed
    coverage = SpeechCoverage(vad)
    assert coverage.review(audio, clip_end, audio.size / 16000).retry_from is None  # only silence after the words
    assert coverage.review(audio, 0.0, LEAD_S - 0.3, wrote_nothing=True).retry_from is None  # silence judged silent
    assert coverage.recovered_s == coverage.uncovered_s == 0.0
    assert SpeechCoverage(None).review(audio, 0.0, audio.size / 16000).retry_from is None  # coverage off
