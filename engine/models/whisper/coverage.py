"""Speech coverage: speech the VAD hears that no decoded word covers is decoded once more.

Whisper can end a window early: it emits end-of-text before the window's speech ends (tiny.en
does after a short utterance followed by a pause), judges a window that holds speech silent,
or has its output thrown away by a repetition guard. Both reference decoders then move on past
that speech and it never reaches the transcript. After each window the decoded text's end (its
last segment's or word's end) is compared with Silero's speech in the audio the window consumed;
speech past that end is decoded again, from where the text ends, as a new window.

Retries are bounded: each stretch of audio gets at most one more decode (`retried_until`), so
silence, music or noise the VAD takes for speech costs one decode, never a loop. What is
re-decoded and what stays without words after its retry are counted
(`oasr_engine_speech_{recovered,uncovered}_seconds_total`).

The VAD runs only over a window's uncovered tail, and only when that tail is long enough to
hold a word: a window whose text runs to its end costs nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from engine.models.whisper.totals import WhisperTotals
from engine.vad import SAMPLE_RATE, WINDOW_SAMPLES, VoiceActivityModel, speech_probs

logger = logging.getLogger(__name__)

SPEECH_PROB = 0.5
"""A 32 ms window scored above this is speech (Silero's own speech threshold)."""
MIN_SPEECH_S = 0.25
"""Uncovered speech shorter than this in all is not decoded again: a breath, a word's tail past
its timestamp, or a click is not an utterance (one short word is ~0.3 s)."""
COVER_SLACK_S = 0.2
"""Speech this close after the text's end counts as covered: Whisper's timestamps are 20 ms
steps and often end a word early."""
VAD_LEAD_S = 0.5
"""Audio scored before the checked stretch, so Silero's recurrent state has settled there."""
RETRY_LEAD_S = 0.2
"""A window decoded again after a no-speech verdict starts this far before the speech."""


@dataclass(frozen=True)
class Verdict:
    retry_from: float | None
    """Where (s) to decode again from: the text's end, or, when the window wrote nothing, shortly
    before the speech it missed; None: go on as decoded."""
    recovered_s: float = 0.0
    """Speech (s) that no word covered and that now gets one more decode."""
    uncovered_s: float = 0.0
    """Speech (s) still without words after its extra decode."""


def speech_runs(vad: VoiceActivityModel, audio: np.ndarray, start_s: float, end_s: float,
                offset_s: float = 0.0) -> list[tuple[float, float]]:
    """Speech (start, end) in seconds, of `audio` (16 kHz, its first sample at `offset_s`) between
    `start_s` and `end_s`, at the VAD's 32 ms resolution."""
    lead = max(offset_s, start_s - VAD_LEAD_S)
    first = max(0, round((lead - offset_s) * SAMPLE_RATE))
    last = min(audio.size, round((end_s - offset_s) * SAMPLE_RATE))
    if last - first < WINDOW_SAMPLES:
        return []
    probs = speech_probs(vad, audio[first:last])
    runs: list[tuple[float, float]] = []
    window_s = WINDOW_SAMPLES / SAMPLE_RATE
    t0 = offset_s + first / SAMPLE_RATE
    for i, prob in enumerate(probs):
        if prob <= SPEECH_PROB:
            continue
        lo, hi = max(start_s, t0 + i * window_s), min(end_s, t0 + (i + 1) * window_s)
        if hi <= lo:
            continue
        if runs and lo - runs[-1][1] < 1e-6:
            runs[-1] = (runs[-1][0], hi)
        else:
            runs.append((lo, hi))
    return runs


def _length(runs: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in runs)


def _clip(runs: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(s, lo), min(e, hi)) for s, e in runs if min(e, hi) > max(s, lo)]


class SpeechCoverage:
    """One request's (or stream's) coverage bookkeeping: which audio already had its extra decode."""

    def __init__(self, vad: VoiceActivityModel | None, totals: WhisperTotals | None = None):
        """`vad` None: coverage is off (every verdict is 'go on'); `totals`: the runner's counts,
        which the seconds recovered and left uncovered are added to."""
        self.vad = vad
        self.totals = totals
        self.retried_until = 0.0  # s: speech before this has had its one extra decode
        self.recovered_s = 0.0
        self.uncovered_s = 0.0

    def review(self, audio: np.ndarray, covered_until: float, consumed_until: float,
               offset_s: float = 0.0, wrote_nothing: bool = False) -> Verdict:
        """A window's text ends at `covered_until` (s) and the transcription would go on from
        `consumed_until`: where to decode again from, if the VAD hears speech between them that
        has not had its extra decode yet. `wrote_nothing`: the window kept no text (judged
        silent, or its text dropped), so it is decoded again from shortly before that speech.
        `audio` holds the stretch, its first sample at `offset_s`."""
        start = covered_until if wrote_nothing else covered_until + COVER_SLACK_S
        if self.vad is None or consumed_until - start < MIN_SPEECH_S:
            return Verdict(None)
        runs = speech_runs(self.vad, audio, start, consumed_until, offset_s)
        stale = _length(_clip(runs, start, self.retried_until))
        fresh = _clip(runs, max(start, self.retried_until), consumed_until)
        verdict = Verdict(None, uncovered_s=stale if stale >= MIN_SPEECH_S else 0.0)
        if _length(fresh) >= MIN_SPEECH_S:
            self.retried_until = consumed_until
            retry_from = max(covered_until, fresh[0][0] - RETRY_LEAD_S) if wrote_nothing else covered_until
            verdict = Verdict(retry_from, _length(fresh), verdict.uncovered_s)
        self._count(verdict)
        return verdict

    def hears_speech(self, audio: np.ndarray, start_s: float, end_s: float, offset_s: float = 0.0) -> bool:
        """Whether the VAD hears at least MIN_SPEECH_S of speech between `start_s` and `end_s`
        (True without a VAD: nothing is judged silent on its word alone)."""
        if self.vad is None:
            return True
        return _length(speech_runs(self.vad, audio, start_s, end_s, offset_s)) >= MIN_SPEECH_S

    def _count(self, verdict: Verdict) -> None:
        if verdict.recovered_s:
            self.recovered_s += verdict.recovered_s
            if self.totals is not None:
                self.totals.speech_recovered_s += verdict.recovered_s
            logger.debug("re-decoding %.2f s of speech no word covered", verdict.recovered_s)
        if verdict.uncovered_s:
            self.uncovered_s += verdict.uncovered_s
            if self.totals is not None:
                self.totals.speech_uncovered_s += verdict.uncovered_s
