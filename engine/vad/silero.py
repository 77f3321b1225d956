"""Silero VAD from the `silero-vad` PyPI package, with explicit per-stream state.

The package ships its network inside the wheel (silero_vad/data/: silero_vad.onnx and the
TorchScript silero_vad.jit), so nothing is downloaded. We do not use its Python wrappers:
they keep one hidden state per model object (one stream), and importing the `silero_vad`
package calls `torch.set_num_threads(1)` for the whole process, which would slow the ASR
engine. Instead we locate the files without importing the package and call the 16 kHz
network as a pure function `(context + window, state) -> (probability, state)`, so one
loaded model serves every stream and several streams' windows are scored in one batch.

Backends: ONNX Runtime (default when installed) runs on its own single thread, so VAD cost
stays ~0.1-0.3 ms per window regardless of the torch thread pool the engine is saturating;
TorchScript (the fallback) shares that pool, and tiny calls there slow down badly when the
cores are busy. A whole recording (`score_recording`) is scored in large batched calls of the
TorchScript network's pieces whichever the backend (silero_recording.py).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from engine.errors import CheckpointError
from engine.vad.base import SAMPLE_RATE, WINDOW_SAMPLES, as_mono_float32, speech_probs
from engine.vad.silero_recording import CONTEXT_SAMPLES, RecordingScorer, load_torchscript, recording_scorer

logger = logging.getLogger(__name__)

STATE_SIZE = 128
"""LSTM width; the network's state is (2, B, STATE_SIZE) (hidden and cell)."""
MODEL_FILES = {"onnx": "silero_vad.onnx", "torch": "silero_vad.jit"}
CHECK_SAMPLES = 40 * WINDOW_SAMPLES + 100
"""Samples of rising noise (1.3 s, the last window partial) the batched scorer is checked on at load."""
RECORDING_TOLERANCE = 1e-4
"""Largest difference from window-by-window scoring the batched scorer may show at load (the
backends differ from each other by up to ~2e-5)."""

Backend = Literal["auto", "onnx", "torch"]
# (B, CONTEXT + WINDOW) float32, (2, B, STATE) float32 -> (B,) probabilities, (2, B, STATE) state
Network = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass
class SileroState:
    lstm: np.ndarray
    """(2, STATE_SIZE) LSTM hidden and cell state."""
    context: np.ndarray
    """(CONTEXT_SAMPLES,) tail of the previous window."""


def packaged_model_path(backend: Literal["onnx", "torch"]) -> Path:
    """Path of the model file inside the installed `silero-vad` package."""
    # find_spec of a top-level package does not execute its __init__ (see module docstring).
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError("the 'silero-vad' package is not installed (pip install silero-vad)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / MODEL_FILES[backend]
    if not path.is_file():
        raise CheckpointError(f"silero-vad package has no bundled model at {path}")
    return path


def _onnx_network(path: Path) -> Network:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    rate = np.array(SAMPLE_RATE, dtype=np.int64)

    def run(x: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        prob, new_state = session.run(None, {"input": x, "state": state, "sr": rate})
        return prob[:, 0], new_state

    return run


def _torch_network(wrapper: Any, path: Path) -> Network:
    """The 16 kHz network of the loaded TorchScript file at `path` as a `Network`."""
    import torch

    # The file's top-level module is the stateful wrapper; `_model` is its 16 kHz network.
    network = getattr(wrapper, "_model", None)
    if network is None:
        raise CheckpointError(f"{path} has no 16 kHz network '_model'; unsupported silero-vad version")
    network.eval()

    def run(x: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            prob, new_state = network(torch.from_numpy(x), torch.from_numpy(state))  # (B, 1), (2, B, H)
        return prob[:, 0].numpy(), new_state.numpy()

    return run


class SileroVAD:
    """Silero VAD (v5+) 16 kHz network; one instance serves any number of streams."""

    name = "silero"

    def __init__(self, network: Network, backend: str, recording: RecordingScorer | None = None) -> None:
        self._network = network
        self.backend = backend
        self._recording = recording

    def score_recording(self, audio: np.ndarray) -> np.ndarray:
        """`speech_probs` of a whole recording (16 kHz float32 mono), in batched calls where the
        packaged TorchScript network's pieces were found (silero_recording.py), else window by
        window."""
        if self._recording is None:
            return speech_probs(self, audio)
        return self._recording(as_mono_float32(audio))

    @classmethod
    def load(cls, backend: Backend = "auto") -> SileroVAD:
        """Load the packaged network: ONNX Runtime when installed ('auto'), else TorchScript."""
        if backend == "auto":
            backend = "onnx" if importlib.util.find_spec("onnxruntime") is not None else "torch"
        if backend not in MODEL_FILES:
            raise ValueError(f"backend must be one of auto, {', '.join(MODEL_FILES)}; got {backend!r}")
        path = packaged_model_path(backend)
        try:
            script = load_torchscript(packaged_model_path("torch"))  # whole recordings use it either way
            network = _onnx_network(path) if backend == "onnx" else _torch_network(script, path)
            model = cls(network, backend, recording_scorer(script))
            model._check_shapes()
            model._check_recording_scorer()
        except CheckpointError:
            raise
        except Exception as exc:  # a broken or changed file: name it at load, not on a live stream
            raise CheckpointError(f"cannot load Silero VAD from {path}: {exc}") from exc
        logger.info("loaded Silero VAD (%s) from %s", backend, path)
        return model

    def _check_shapes(self) -> None:
        states = [self.initial_state(), self.initial_state()]
        probs, new_states = self.predict(np.zeros((2, WINDOW_SAMPLES), np.float32), states)
        if probs.shape != (2,) or new_states[0].lstm.shape != (2, STATE_SIZE):
            raise CheckpointError(f"unexpected Silero output shapes {probs.shape}, {new_states[0].lstm.shape}")

    def _check_recording_scorer(self) -> None:
        """The batched scorer must score as the network window by window (else it is not used)."""
        if self._recording is None:
            return
        rng = np.random.default_rng(0)
        audio = (rng.standard_normal(CHECK_SAMPLES) * np.linspace(0, 0.3, CHECK_SAMPLES)).astype(np.float32)
        gap = float(np.abs(self._recording(audio) - speech_probs(self, audio)).max())
        if gap > RECORDING_TOLERANCE:
            logger.warning("Silero's batched scorer differs by %.2g: long recordings are scored window by window", gap)
            self._recording = None

    def initial_state(self) -> SileroState:
        return SileroState(
            lstm=np.zeros((2, STATE_SIZE), np.float32), context=np.zeros(CONTEXT_SAMPLES, np.float32)
        )

    def predict(
        self, windows: np.ndarray, states: Sequence[SileroState]
    ) -> tuple[np.ndarray, list[SileroState]]:
        if windows.ndim != 2 or windows.shape[1] != WINDOW_SAMPLES or windows.shape[0] != len(states):
            raise ValueError(
                f"expected ({len(states)}, {WINDOW_SAMPLES}) windows at {SAMPLE_RATE} Hz, got {windows.shape}"
            )
        context = np.stack([s.context for s in states])  # (B, C)
        x = np.concatenate([context, windows.astype(np.float32, copy=False)], axis=1)  # (B, C + W)
        lstm = np.stack([s.lstm for s in states], axis=1)  # (2, B, H)
        probs, lstm = self._network(x, lstm)
        new_states = [
            SileroState(lstm=np.array(lstm[:, i]), context=x[i, -CONTEXT_SAMPLES:].copy())
            for i in range(len(states))
        ]
        return np.asarray(probs, dtype=np.float32), new_states
