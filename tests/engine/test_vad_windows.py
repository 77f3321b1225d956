"""Cutting a long recording into speech windows (engine/vad/windows.py), on scripted VAD
probabilities: where cuts fall, what silence is left out, how window times map back."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.vad.base import SAMPLE_RATE, WINDOW_SAMPLES
from engine.vad.windows import KEEP_SILENCE_S, PAD_MS, SpeechMap, SpeechWindow, speech_windows

FRAMES_PER_S = SAMPLE_RATE / WINDOW_SAMPLES  # VAD windows per second (31.25)


def scripted(spans: list[tuple[float, float]], seconds: float) -> tuple[np.ndarray, SpeechMap]:
    """A recording of `seconds` whose VAD hears speech exactly in `spans` (s)."""
    probs = np.full(int(np.ceil(seconds * FRAMES_PER_S)), 0.01, dtype=np.float32)
    for a, b in spans:
        probs[int(a * FRAMES_PER_S) : int(b * FRAMES_PER_S)] = 0.95
    return np.zeros(int(seconds * SAMPLE_RATE), dtype=np.float32), SpeechMap(probs)


def test_windows_hold_at_most_one_window_and_cut_only_in_silence() -> None:
    spans = [(1.0 + 6.0 * i, 5.0 + 6.0 * i) for i in range(20)]  # 4 s utterances, 2 s pauses
    audio, speech = scripted(spans, 125.0)
    windows = speech_windows(audio, speech, 30.0)
    assert len(windows) >= 4
    for w in windows:
        assert w.samples <= 30 * SAMPLE_RATE
    seams = [(a.end, b.start) for a, b in itertools.pairwise(windows)]
    for end, start in seams:
        assert end <= start
        # every cut lies in a pause: no utterance straddles it
        assert not any(a < end - 1e-6 and b > end + 1e-6 for a, b in spans), end
    # every utterance is inside a window
    for a, b in spans:
        assert any(w.start <= a and b <= w.end for w in windows), (a, b)


def test_leading_trailing_and_long_inner_silence_are_left_out() -> None:
    gap = KEEP_SILENCE_S + 8.0
    spans = [(10.0, 14.0), (14.0 + gap, 18.0 + gap)]
    audio, speech = scripted(spans, 18.0 + gap + 40.0)
    windows = speech_windows(audio, speech, 30.0)
    pad = PAD_MS / 1000
    assert windows[0].start == pytest.approx(10.0 - pad, abs=0.05)
    assert windows[-1].end == pytest.approx(18.0 + gap + pad, abs=0.05)
    pieces = [p for w in windows for p in w.pieces]
    assert len(pieces) == 2  # the long silence between them is not decoded
    kept = sum(e - s for s, e in pieces) / SAMPLE_RATE
    assert kept == pytest.approx(8.0 + 4 * pad, abs=0.1)


def test_short_inner_silence_stays_in_its_window() -> None:
    spans = [(1.0, 5.0), (9.0, 13.0)]  # 4 s pause, under KEEP_SILENCE_S
    audio, speech = scripted(spans, 20.0)
    [window] = speech_windows(audio, speech, 30.0)
    assert len(window.pieces) == 1


def test_speech_without_silence_is_split_at_its_quietest_point() -> None:
    audio, speech = scripted([(0.5, 70.0)], 71.0)
    dip = int(20.0 * FRAMES_PER_S)
    speech.probs[dip] = 0.6  # still speech, but the least speech-like moment of its second half
    windows = speech_windows(audio, speech, 30.0)
    assert all(w.samples <= 30 * SAMPLE_RATE for w in windows)
    assert windows[0].end == pytest.approx(dip * WINDOW_SAMPLES / SAMPLE_RATE, abs=0.05)
    assert windows[1].start == pytest.approx(windows[0].end, abs=1e-6)


def test_window_times_map_to_the_recording_monotonically() -> None:
    window = SpeechWindow(((16_000, 48_000), (160_000, 192_000)))  # 1-3 s and 10-12 s
    assert window.to_recording(0.0) == pytest.approx(1.0)
    assert window.to_recording(1.5) == pytest.approx(2.5)
    assert window.to_recording(2.0, end=True) == pytest.approx(3.0)  # an end on the seam: first piece
    assert window.to_recording(2.0) == pytest.approx(10.0)  # a start on the seam: second piece
    assert window.to_recording(3.0) == pytest.approx(11.0)
    assert window.to_recording(9.0, end=True) == pytest.approx(12.0)  # past the end: clamped
    times = [window.to_recording(t / 10) for t in range(50)]
    assert times == sorted(times)


def test_heard_needs_faint_speech() -> None:
    _, speech = scripted([(2.0, 3.0)], 10.0)
    assert speech.heard(1.5, 2.5) and not speech.heard(4.0, 9.0)
    speech.probs[int(6 * FRAMES_PER_S)] = 0.15  # a whisper Silero barely scores
    assert speech.heard(4.0, 9.0)


def test_a_word_does_not_continue_over_a_left_out_silence() -> None:
    window = SpeechWindow(((16_000, 48_000), (160_000, 192_000)))  # 1-3 s and 10-12 s
    assert window.span_to_recording(1.5, 2.5) == pytest.approx((2.5, 3.0))  # ends at its piece's end
    assert window.span_to_recording(2.2, 2.6) == pytest.approx((10.2, 10.6))


def test_faint_speech_in_a_left_out_silence_is_decoded() -> None:
    """In a silence long enough to be left out (and before the first run), a stretch the VAD
    scores 0.3-0.5 (falsetto, whispers: Silero's 0.5 gate does not start on it) is decoded; one
    scored below FAINT_RUN_THRESHOLD is not, and the silence around them is still left out."""
    from engine.vad.windows import FAINT_RUN_THRESHOLD

    gap = KEEP_SILENCE_S + 30.0
    spans = [(8.0, 12.0), (12.0 + gap, 16.0 + gap)]
    audio, speech = scripted(spans, 16.0 + gap + 5.0)
    probs = speech.probs.copy()
    stretches = {"before": (2.0, 3.5, 0.4), "inside": (26.0, 28.0, 0.4), "too faint": (40.0, 41.0, FAINT_RUN_THRESHOLD - 0.1)}
    for a, b, level in stretches.values():
        probs[int(a * FRAMES_PER_S) : int(b * FRAMES_PER_S)] = level
    pieces = [p for w in speech_windows(audio, SpeechMap(probs), 30.0) for p in w.pieces]

    def decoded(a: float, b: float) -> bool:
        return any(s <= a * SAMPLE_RATE and b * SAMPLE_RATE <= e for s, e in pieces)

    assert decoded(*stretches["before"][:2]) and decoded(*stretches["inside"][:2]), pieces
    assert not any(s < 40.5 * SAMPLE_RATE < e for s, e in pieces), pieces
    assert len(pieces) == 3  # the first run with the stretch before it, the faint one, the last run
    # without the faint stretches: the two runs only
    assert len([p for w in speech_windows(audio, speech, 30.0) for p in w.pieces]) == 2


@pytest.mark.parametrize("dbfs", [-25.0, -45.0])
def test_steady_noise_in_a_left_out_silence_is_not_decoded(dbfs: float) -> None:
    """Silero on white noise in a long pause between two dev clips (scored as one recording):
    under FAINT_RUN_THRESHOLD throughout (at most ~0.2), so no piece of the pause is decoded."""
    from engine.vad.silero import SileroVAD
    from engine.vad.windows import speech_map
    from tests.conftest import reference_clips

    first, second = (c.audio for c in sorted(reference_clips(), key=lambda c: c.id)[:2])
    noise = np.random.default_rng(0).standard_normal(40 * SAMPLE_RATE) * 10 ** (dbfs / 20)
    audio = np.concatenate([first, noise.astype(np.float32), second])
    windows = speech_windows(audio, speech_map(audio, SileroVAD.load()), 30.0)
    pause = (first.size + SAMPLE_RATE, first.size + noise.size - SAMPLE_RATE)
    assert windows and not any(s < pause[1] and e > pause[0] for w in windows for s, e in w.pieces)
