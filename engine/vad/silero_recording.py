"""Silero VAD over a whole recording in batched calls, as one stream scored window by window.

Silero's 16 kHz network is a stateless front (an STFT and four convolutions over each 32 ms window
and the 4 ms before it) followed by a one-layer LSTM cell and a 1x1 convolution. Window by window
(`SileroVAD.predict`), a 10-minute recording is 18,800 calls: 2.4 s on one thread with ONNX
Runtime. Here the front runs over CHUNK_WINDOWS windows per call and the LSTM over the chunk's
sequence in one `torch.nn.LSTM` call, its state carried from chunk to chunk: the same
computation, so the same probabilities (within 2e-5 of the window-by-window ONNX ones on the
long-form benchmark recording; none crosses a threshold), in 0.37 s on one thread.

The pieces are read from the packaged TorchScript file (`_model.stft`, `.encoder`, `.decoder.rnn`,
`.decoder.decoder`); `recording_scorer` returns None where a silero-vad release names them
otherwise, and the caller scores window by window.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.vad.base import WINDOW_SAMPLES

logger = logging.getLogger(__name__)

CONTEXT_SAMPLES = 64
"""Samples before each window the 16 kHz network sees with it (the previous window's tail)."""
CHUNK_WINDOWS = 2048
"""Windows (~65 s) whose front runs in one call: ~5 MB of samples, so an hour is never copied
whole (its probabilities are 450 KB)."""

RecordingScorer = Callable[[np.ndarray], np.ndarray]
"""16 kHz float32 mono -> (ceil(samples / WINDOW_SAMPLES),) float32 speech probabilities."""


def load_torchscript(path: Path) -> Any:
    """The packaged TorchScript file at `path`, loaded on the CPU."""
    with warnings.catch_warnings():
        # torch 2.9+ deprecates TorchScript loading; the package ships this format.
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]


def recording_scorer(wrapper: Any) -> RecordingScorer | None:
    """The batched scorer of the loaded TorchScript file `wrapper` (`load_torchscript`); None
    where its pieces are not where this module reads them."""
    try:
        network: Any = wrapper._model  # a ScriptModule: its attributes are untyped
        front = (network.stft, network.encoder)
        cell, head = network.decoder.rnn, getattr(network.decoder.decoder, "2")
        lstm = torch.nn.LSTM(cell.weight_ih.shape[1], cell.weight_hh.shape[1])
        lstm.load_state_dict({"weight_ih_l0": cell.weight_ih, "weight_hh_l0": cell.weight_hh,
                              "bias_ih_l0": cell.bias_ih, "bias_hh_l0": cell.bias_hh})
    except (AttributeError, RuntimeError) as exc:
        logger.warning("Silero's TorchScript pieces not found (%s): long recordings are scored window by window", exc)
        return None
    lstm.eval()
    return lambda audio: _score(audio, front, lstm, head)


def _score(audio: np.ndarray, front: tuple[Any, Any], lstm: torch.nn.LSTM, head: Any) -> np.ndarray:
    stft, encoder = front
    n_windows = -(-audio.size // WINDOW_SAMPLES)
    probs = np.empty(n_windows, dtype=np.float32)
    state: tuple[torch.Tensor, torch.Tensor] | None = None
    with torch.inference_mode():
        for first in range(0, n_windows, CHUNK_WINDOWS):
            last = min(first + CHUNK_WINDOWS, n_windows)
            frames = _frames(audio, first, last)  # (last - first, CONTEXT_SAMPLES + WINDOW_SAMPLES)
            features = encoder(stft(frames)).squeeze(-1)  # (windows, hidden)
            hidden, state = lstm(features, state)
            probs[first:last] = torch.sigmoid(head(torch.relu(hidden).unsqueeze(-1))).reshape(-1).numpy()
    return probs


def _frames(audio: np.ndarray, first: int, last: int) -> torch.Tensor:
    """Windows `first`..`last` of `audio`, each after the CONTEXT_SAMPLES before it (zeros before
    the recording's start and after its end), as `SileroVAD.predict` feeds them one by one."""
    start = first * WINDOW_SAMPLES - CONTEXT_SAMPLES
    buffer = np.zeros((last - first) * WINDOW_SAMPLES + CONTEXT_SAMPLES, dtype=np.float32)
    lo, hi = max(start, 0), min(last * WINDOW_SAMPLES, audio.size)
    buffer[lo - start : hi - start] = audio[lo:hi]
    size = CONTEXT_SAMPLES + WINDOW_SAMPLES
    return torch.from_numpy(buffer).unfold(0, size, WINDOW_SAMPLES).contiguous()
