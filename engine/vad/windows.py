"""A long recording cut at VAD silences into windows a recognizer decodes independently.

    speech_map(audio, model)                         ->  SpeechMap (Silero's verdict per 32 ms)
    speech_windows(audio, speech, window_s=30)       ->  [SpeechWindow]

Speech runs (`speech_segments`: padded, runs longer than a window split at their least
speech-like point, the quietest 32 ms of the run's second half) are packed, in order, into windows
of at most `window_s` seconds, as faster-whisper's batched pipeline and WhisperX pack VAD chunks.
Cuts fall only in silences (or at such a quietest point). A silence shorter than KEEP_SILENCE_S
between two runs stays in a window (in the next one, as much as fits, at a cut); a longer one, and the audio before the first run and
after the last, is left out (only the runs' padding stays), so a recognizer is never shown long
stretches the VAD hears no speech in and cannot invent text there. Short silences stay because
Silero misses whispered and falsetto speech that Whisper transcribes (measured on the long-form
benchmark recording: leaving out every silence lost those utterances, 19.4 % WER against 9.9 %
keeping silences under 12 s). A window maps its own times back to the recording's
(`SpeechWindow.to_recording`); `SpeechMap.heard` says whether any faint speech is in a stretch.

Family-agnostic: the offline Whisper runner decodes every window of a long request as a row of
its batch (engine/models/whisper/longform.py); a live stream's backlog can be cut the same way.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from engine.vad.base import SAMPLE_RATE, WINDOW_SAMPLES, VoiceActivityModel, recording_speech_probs
from engine.vad.segments import speech_segments

PAD_MS = 300
"""Audio kept on each side of a speech run (halved where two runs are closer): the chunking
strategy's default, enough for a word's soft onset and tail."""
SILENCE_MS = 500
"""Silence that separates two speech runs (live server VAD's and chunking's default)."""
KEEP_SILENCE_S = 12.0
"""Silences shorter than this between two runs of a window stay in it (module docstring)."""
FAINT_RUN_THRESHOLD = 0.3
"""In a stretch the runs leave out (a long silence, or before the first run or after the last),
speech that the VAD scores at least this (Silero's gate otherwise: 250 ms to start, 500 ms of
silence to end) is decoded too. Silero scores falsetto speech 0.3-0.8 with dips, which its 0.5
gate does not start on: a falsetto sentence after a 20 s pause was never decoded."""
FAINT_SPEECH_PROB = 0.1
"""A stretch holds (faint) speech when Silero scores some 32 ms of it at least this: whispered
speech scores 0.1-0.3 where it scores at all, digital silence and room tone ~0.01."""


@dataclass(frozen=True)
class SpeechMap:
    """The VAD's speech probability for every 32 ms of a recording."""

    probs: np.ndarray

    def heard(self, start_s: float, end_s: float) -> bool:
        """Whether the VAD hears any (faint) speech between `start_s` and `end_s`."""
        first = max(int(start_s * SAMPLE_RATE) // WINDOW_SAMPLES, 0)
        last = max(-(-int(end_s * SAMPLE_RATE) // WINDOW_SAMPLES), first + 1)
        return bool((self.probs[first:last] >= FAINT_SPEECH_PROB).any())


def speech_map(audio: np.ndarray, model: VoiceActivityModel) -> SpeechMap:
    """Score a whole recording (16 kHz float32 mono)."""
    return SpeechMap(recording_speech_probs(model, audio))


@dataclass(frozen=True)
class SpeechWindow:
    """Pieces of a recording (sample ranges, in order, non-overlapping) decoded as one window."""

    pieces: tuple[tuple[int, int], ...]

    @property
    def start(self) -> float:
        """Where the window's first piece starts in the recording (s)."""
        return self.pieces[0][0] / SAMPLE_RATE

    @property
    def end(self) -> float:
        """Where the window's last piece ends in the recording (s)."""
        return self.pieces[-1][1] / SAMPLE_RATE

    @property
    def samples(self) -> int:
        return sum(e - s for s, e in self.pieces)

    @property
    def seams(self) -> list[float]:
        """Where (s into the window's audio) one piece ends and the next begins."""
        return [offset / SAMPLE_RATE for offset in self._offsets()[1:]]

    def audio(self, recording: np.ndarray) -> np.ndarray:
        """The window's audio: its pieces of `recording`, joined."""
        return np.ascontiguousarray(np.concatenate([recording[s:e] for s, e in self.pieces]))

    def to_recording(self, t: float, *, end: bool = False) -> float:
        """A time in the window's audio (s) as a time in the recording. A time on the seam of two
        pieces is the first piece's end when it is an `end`, else the second piece's start, so a
        segment or word never stretches over the silence left out between them."""
        sample = max(0.0, t) * SAMPLE_RATE
        offsets = self._offsets()
        find = bisect.bisect_left if end else bisect.bisect_right
        i = min(max(find(offsets, sample) - 1, 0), len(self.pieces) - 1)
        start, stop = self.pieces[i]
        return min(start + sample - offsets[i], stop) / SAMPLE_RATE

    def span_to_recording(self, start: float, end: float) -> tuple[float, float]:
        """A word's or segment's (start, end) in the window as times in the recording: it does
        not continue over the silence left out at a seam, so it ends in the piece it starts in."""
        first = self.to_recording(start)
        piece_end = next(e for s, e in self.pieces if first * SAMPLE_RATE < e or e == self.pieces[-1][1])
        return first, max(first, min(self.to_recording(end, end=True), piece_end / SAMPLE_RATE))

    def _offsets(self) -> list[float]:
        """Where each piece starts in the window's audio (samples)."""
        out, total = [], 0
        for s, e in self.pieces:
            out.append(float(total))
            total += e - s
        return out


def speech_windows(audio: np.ndarray, speech: SpeechMap, window_s: float = 30.0, *,
                   threshold: float = 0.5, keep_silence_s: float = KEEP_SILENCE_S) -> list[SpeechWindow]:
    """The recording's speech (16 kHz float32 mono, scored as `speech`) packed into windows of at
    most `window_s`; empty when the VAD hears no speech. A silence shorter than `keep_silence_s`
    between two runs of one window stays in it."""
    runs = speech_segments(audio, SAMPLE_RATE, probs=speech.probs, threshold=threshold,
                           silence_duration_ms=SILENCE_MS, padding_ms=PAD_MS, max_segment_s=window_s)
    runs = _with_faint_runs(audio, speech, runs, keep_silence_s, window_s)
    limit = int(window_s * SAMPLE_RATE)
    keep = int(keep_silence_s * SAMPLE_RATE)
    windows: list[list[tuple[int, int]]] = []
    used = 0
    for start_s, end_s in runs:
        piece = (round(start_s * SAMPLE_RATE), min(round(end_s * SAMPLE_RATE), audio.size))
        if piece[1] <= piece[0]:
            continue
        size = piece[1] - piece[0]
        gap = piece[0] - windows[-1][-1][1] if windows else 0
        if windows and gap < keep:  # the silence stays: in this window if it fits, else a new one
            if used + gap + size <= limit:
                last = windows[-1][-1]
                windows[-1][-1] = (last[0], piece[1])
                used += gap + size
            else:  # the next window starts with as much of the silence as fits: nothing in it is lost
                piece = (max(windows[-1][-1][1], piece[1] - limit), piece[1])
                windows.append([piece])
                used = piece[1] - piece[0]
        elif windows and used + size <= limit:
            last = windows[-1][-1]
            if last[1] == piece[0]:  # runs whose padding meets: one piece, no seam
                windows[-1][-1] = (last[0], piece[1])
            else:
                windows[-1].append(piece)
            used += size
        else:
            windows.append([piece])
            used = size
    return [SpeechWindow(tuple(w)) for w in windows]


def _with_faint_runs(audio: np.ndarray, speech: SpeechMap, runs: list[tuple[float, float]],
                     keep_silence_s: float, window_s: float) -> list[tuple[float, float]]:
    """`runs` and, in each stretch they leave out (a silence of at least `keep_silence_s`, and
    the audio before the first run and after the last), the runs found there at
    FAINT_RUN_THRESHOLD, in order."""
    bounds = [0.0, *(t for run in runs for t in run), audio.size / SAMPLE_RATE]
    gaps = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    added: list[tuple[float, float]] = []
    for i, (start, end) in enumerate(gaps):
        inner = 0 < i < len(gaps) - 1
        if end - start < (keep_silence_s if inner else 0.0):
            continue
        first = -(-round(start * SAMPLE_RATE) // WINDOW_SAMPLES)  # whole VAD windows inside the gap
        last = round(end * SAMPLE_RATE) // WINDOW_SAMPLES
        if last - first < 1:
            continue
        offset = first * WINDOW_SAMPLES / SAMPLE_RATE
        found = speech_segments(audio[first * WINDOW_SAMPLES : last * WINDOW_SAMPLES], SAMPLE_RATE,
                                probs=speech.probs[first:last], threshold=FAINT_RUN_THRESHOLD,
                                silence_duration_ms=SILENCE_MS, padding_ms=PAD_MS, max_segment_s=window_s)
        added += [(offset + a, offset + b) for a, b in found]
    return sorted(runs + added)
