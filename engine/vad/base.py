"""The seam every voice-activity model implements, and the audio framing they share.

A model scores fixed windows of 16 kHz float32 mono audio with a speech probability.
It may be recurrent (Silero carries an LSTM state), so the state of each stream lives
outside the model and travels with the call: one model instance serves many streams,
and several streams' windows can be scored in one batched call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from engine.errors import InvalidRequestError

SAMPLE_RATE = 16_000
"""Hz; every VAD model here scores audio at this rate."""
WINDOW_SAMPLES = 512
"""Samples per scored window: Silero's native 16 kHz window."""
WINDOW_MS = WINDOW_SAMPLES * 1000 // SAMPLE_RATE
"""32 ms: the time resolution of every speech decision."""


@runtime_checkable
class VoiceActivityModel(Protocol):
    """Speech probability per 32 ms window, with per-stream state kept by the caller."""

    name: str

    def initial_state(self) -> Any:
        """A fresh state for a new stream (opaque to callers)."""
        ...

    def predict(self, windows: np.ndarray, states: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
        """Score one window per stream.

        windows: (B, WINDOW_SAMPLES) float32, row i the next window of stream i.
        states: B states, one per stream, as returned by the previous call (or `initial_state`).
        Returns (B,) float32 probabilities in [0, 1] and the B new states. Callers must use the
        returned states; an implementation may update and return the same objects.
        """
        ...


def as_mono_float32(audio: object, what: str = "audio") -> np.ndarray:
    """Check that `audio` is 1-D finite samples and return it as a float32 array."""
    array = np.asarray(audio)
    if array.ndim != 1:
        raise InvalidRequestError(f"{what} must be 1-D mono samples, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.floating):
        raise InvalidRequestError(f"{what} must be float samples in [-1, 1], got dtype {array.dtype}")
    array = array.astype(np.float32, copy=False)
    if array.size and not np.isfinite(array).all():
        raise InvalidRequestError(f"{what} contains NaN or infinite samples")
    return array


def speech_probs(model: VoiceActivityModel, audio: np.ndarray) -> np.ndarray:
    """Speech probability of every window of one whole recording at SAMPLE_RATE.

    The last partial window is zero-padded so the end of the audio is scored too.
    Returns (ceil(len(audio) / WINDOW_SAMPLES),) float32.
    """
    audio = as_mono_float32(audio)
    n_windows = -(-audio.size // WINDOW_SAMPLES)
    full = audio.size // WINDOW_SAMPLES
    windows = audio[: full * WINDOW_SAMPLES].reshape(full, WINDOW_SAMPLES)  # (T, W), a view: an hour is not copied
    probs = np.empty(n_windows, dtype=np.float32)
    state = model.initial_state()
    for i in range(n_windows):
        if i < full:
            window = windows[i : i + 1]
        else:  # the zero-padded tail
            window = np.zeros((1, WINDOW_SAMPLES), dtype=np.float32)
            window[0, : audio.size - full * WINDOW_SAMPLES] = audio[full * WINDOW_SAMPLES :]
        prob, (state,) = model.predict(window, [state])
        probs[i] = prob[0]
    return probs


@runtime_checkable
class RecordingScoringModel(Protocol):
    """A model that also scores a whole recording at once (Silero: in batched calls)."""

    def score_recording(self, audio: np.ndarray) -> np.ndarray:
        """`speech_probs` of the recording, computed as the model likes."""
        ...


def recording_speech_probs(model: VoiceActivityModel, audio: np.ndarray) -> np.ndarray:
    """`speech_probs` of a whole recording: the model's own `score_recording` where it has one
    (Silero's batched calls: a 10-minute recording 2.4 s window by window, 0.37 s so), else
    window by window."""
    if isinstance(model, RecordingScoringModel):
        return model.score_recording(audio)
    return speech_probs(model, audio)
