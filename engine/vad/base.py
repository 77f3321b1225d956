"""The seam every voice-activity model implements, and the audio framing they share.

A model scores fixed windows of 16 kHz float32 mono audio with a speech probability.
It may be recurrent (Silero carries an LSTM state), so the state of each stream lives
outside the model and travels with the call: one model instance serves many streams,
and several streams' windows can be scored in one batched call.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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


LANE_WINDOWS = 938
"""Windows (~30 s) each lane of `speech_probs_in_lanes` scores."""
LANE_LEAD_WINDOWS = 16
"""Windows (~0.5 s) a lane scores before its own stretch and discards: Silero's recurrent state
settles within them (coverage.py's VAD_LEAD_S, measured for the same reason)."""


def speech_probs_in_lanes(model: VoiceActivityModel, audio: np.ndarray, workers: int = 1) -> np.ndarray:
    """`speech_probs` of a long recording, its ~30 s stretches scored as parallel streams (one
    batched model call per window position instead of one per window): a 9-minute recording
    took 3.6 s one window at a time on 2 busy cores, as long as the whole batched transcription
    is meant to take. Each lane starts LANE_LEAD_WINDOWS early, so its state at its own first
    window is as settled as a whole-recording pass's. `workers` > 1 scores that many groups of
    lanes on as many threads (a model whose calls run outside the GIL, as ONNX Runtime's do:
    Silero keeps one core busy, and a long upload's first window waits for its whole map)."""
    audio = as_mono_float32(audio)
    n_windows = -(-audio.size // WINDOW_SAMPLES)
    lanes = -(-n_windows // LANE_WINDOWS)
    if lanes <= 1:
        return speech_probs(model, audio)
    lead = LANE_LEAD_WINDOWS
    # lane i covers windows [i*LANE_WINDOWS - lead, (i+1)*LANE_WINDOWS); lane 0's lead is zeros
    padded = np.zeros((lead + lanes * LANE_WINDOWS) * WINDOW_SAMPLES, dtype=np.float32)
    padded[lead * WINDOW_SAMPLES : lead * WINDOW_SAMPLES + audio.size] = audio
    windows = padded.reshape(-1, WINDOW_SAMPLES)  # (lead + lanes * LANE_WINDOWS, W)
    probs = np.empty((lanes, LANE_WINDOWS), dtype=np.float32)
    groups = [g for g in np.array_split(np.arange(lanes), min(max(workers, 1), lanes)) if g.size]
    if len(groups) == 1:
        _score_lanes(model, windows, groups[0], probs)
    else:
        with ThreadPoolExecutor(len(groups), thread_name_prefix="vad-lanes") as pool:
            for done in [pool.submit(_score_lanes, model, windows, g, probs) for g in groups]:
                done.result()
    return probs.reshape(-1)[:n_windows]


def _score_lanes(model: VoiceActivityModel, windows: np.ndarray, lanes: np.ndarray, probs: np.ndarray) -> None:
    """Score `lanes` (indices) of `speech_probs_in_lanes` into their rows of `probs`."""
    lead = LANE_LEAD_WINDOWS
    starts = lanes * LANE_WINDOWS  # first (lead) window of each lane in `windows`
    states = [model.initial_state() for _ in lanes]
    for step in range(lead + LANE_WINDOWS):
        prob, states = model.predict(windows[starts + step], states)
        if step >= lead:
            probs[lanes, step - lead] = prob
