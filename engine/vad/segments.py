"""Offline VAD segmentation of a whole recording (`chunking_strategy` of the transcription API).

Speech runs come from the same `SpeechGate` the live turn detector uses, so offline
segments and live turns agree on what speech is. Runs are then padded, merged when close,
and split when longer than the recognizer's window (30 s for Whisper) at the quietest point.
"""

from __future__ import annotations

import logging

import numpy as np

from engine.errors import InvalidRequestError
from engine.vad.base import (
    SAMPLE_RATE,
    WINDOW_SAMPLES,
    VoiceActivityModel,
    as_mono_float32,
    recording_speech_probs,
)
from engine.vad.turns import SAMPLES_PER_MS, SpeechGate, TurnSettings

logger = logging.getLogger(__name__)

DEFAULT_MAX_SEGMENT_S = 30.0
"""Whisper's window; a longer segment would be cut blindly by the recognizer."""
MIN_MAX_SEGMENT_S = 1.0


def speech_segments(
    audio: np.ndarray,
    sample_rate: int = SAMPLE_RATE,
    *,
    model: VoiceActivityModel | None = None,
    threshold: float = 0.5,
    silence_duration_ms: int = 500,
    min_speech_ms: int = 250,
    padding_ms: int = 300,
    merge_gap_ms: int = 0,
    max_segment_s: float = DEFAULT_MAX_SEGMENT_S,
    probs: np.ndarray | None = None,
) -> list[tuple[float, float]]:
    """Speech segments of a recording as (start_s, end_s), in order and non-overlapping.

    audio: float32 mono; resampled to 16 kHz when `sample_rate` differs.
    model: the VAD to use; None loads the packaged Silero model.
    silence_duration_ms: silence that separates two speech runs.
    padding_ms: audio kept on each side of a run (halved where two runs are closer).
    merge_gap_ms: padded segments closer than this are joined (if the result fits max_segment_s).
    max_segment_s: longer runs are split at their least speech-like window.
    probs: the recording's speech probabilities (`speech_probs`), when already scored.
    """
    if max_segment_s < MIN_MAX_SEGMENT_S:
        raise InvalidRequestError(f"max_segment_s must be >= {MIN_MAX_SEGMENT_S}, got {max_segment_s}")
    if padding_ms < 0 or merge_gap_ms < 0:
        raise InvalidRequestError("padding_ms and merge_gap_ms must be >= 0")
    settings = TurnSettings(
        threshold=threshold,
        silence_duration_ms=silence_duration_ms,
        min_speech_ms=min_speech_ms,
        prefix_padding_ms=padding_ms,
        suffix_padding_ms=padding_ms,
    )
    settings.validate()
    audio = _to_model_rate(as_mono_float32(audio), sample_rate)
    if audio.size == 0:
        return []
    if probs is None:
        if model is None:
            from engine.vad.silero import SileroVAD

            model = SileroVAD.load()
        probs = recording_speech_probs(model, audio)
    runs = _speech_runs(probs, settings, audio.size)
    max_samples = int(max_segment_s * SAMPLE_RATE)
    runs = [piece for run in runs for piece in _split(run, probs, max_samples - 2 * padding_ms * SAMPLES_PER_MS)]
    padded = _pad(runs, padding_ms * SAMPLES_PER_MS, audio.size)
    merged = _merge(padded, merge_gap_ms * SAMPLES_PER_MS, max_samples)
    logger.debug("%d speech runs -> %d segments over %.1f s", len(runs), len(merged), audio.size / SAMPLE_RATE)
    return [(start / SAMPLE_RATE, end / SAMPLE_RATE) for start, end in merged]


def _to_model_rate(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    if sample_rate == SAMPLE_RATE:
        return audio
    if not isinstance(sample_rate, int) or sample_rate < 4000:
        raise InvalidRequestError(f"sample_rate must be an integer >= 4000 Hz, got {sample_rate!r}")
    import soxr

    return np.asarray(soxr.resample(audio, sample_rate, SAMPLE_RATE), dtype=np.float32)


def _speech_runs(probs: np.ndarray, settings: TurnSettings, n_samples: int) -> list[tuple[int, int]]:
    """Unpadded speech runs (sample ranges) as the live gate would find them."""
    gate = SpeechGate(settings)
    runs: list[tuple[int, int]] = []
    start = 0
    for prob in probs:
        for kind, sample in gate.update(float(prob)):
            if kind == "start":
                start = sample
            else:
                runs.append((start, sample))
    if gate.in_speech:
        end = gate.voiced_end if gate.dipped else n_samples
        runs.append((start, min(end, n_samples)))
    return runs


def _split(run: tuple[int, int], probs: np.ndarray, max_samples: int) -> list[tuple[int, int]]:
    """Cut a run longer than max_samples at the least speech-like window of its second half."""
    max_samples = max(max_samples, 4 * WINDOW_SAMPLES)  # leaves a non-empty search range
    pieces = []
    start, end = run
    while end - start > max_samples:
        # Search the windows fully inside [start + max/2, start + max): long enough pieces,
        # and the cut lands where speech is least likely (a breath or a pause).
        first = -(-(start + max_samples // 2) // WINDOW_SAMPLES)
        last = (start + max_samples) // WINDOW_SAMPLES
        cut_window = first + int(np.argmin(probs[first:last]))
        cut = cut_window * WINDOW_SAMPLES
        pieces.append((start, cut))
        start = cut
    pieces.append((start, end))
    return pieces


def _pad(runs: list[tuple[int, int]], pad: int, n_samples: int) -> list[tuple[int, int]]:
    """Pad each run; where two runs are closer than 2*pad, they meet halfway."""
    padded = []
    for i, (start, end) in enumerate(runs):
        lo = max(start - pad, 0) if i == 0 else max(start - pad, (runs[i - 1][1] + start) // 2)
        hi = min(end + pad, n_samples) if i == len(runs) - 1 else min(end + pad, (end + runs[i + 1][0]) // 2)
        padded.append((lo, hi))
    return padded


def _merge(segments: list[tuple[int, int]], gap: int, max_samples: int) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in segments:
        if merged and start - merged[-1][1] <= gap and end - merged[-1][0] <= max_samples:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged
