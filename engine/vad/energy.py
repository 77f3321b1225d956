"""A dependency-free voice-activity model: window loudness against an adaptive noise floor.

Each 32 ms window's RMS level (dBFS) is compared with the quietest level seen over the
last few seconds (minimum statistics: pauses between words and utterances reach the
noise floor often, speech never does), and with an absolute floor below which nothing
counts as speech. The margin maps to a probability with a logistic curve so it plugs into
the same threshold logic as Silero. Cheaper than Silero and blind to what the sound is:
loud non-speech noise passes as speech.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.vad.base import WINDOW_MS, WINDOW_SAMPLES

SILENCE_DBFS = -100.0
"""Level given to digital silence (log of zero); below any real noise floor."""
DEFAULT_MARGIN_DB = 12.0
"""Speech must be this much louder than the noise floor (about 4x the amplitude)."""
DEFAULT_MIN_SPEECH_DBFS = -50.0
"""Windows quieter than this are never speech: conversational speech into a microphone sits
around -40..-20 dBFS, while room hiss after digital silence would otherwise clear the
margin until the floor adapts."""
DEFAULT_FLOOR_WINDOW_S = 3.0
"""How far back the noise floor looks; long enough to contain a pause between words."""
SLOPE_DB = 3.0
"""Logistic width: 3 dB above the gate is p=0.73, 3 dB below is p=0.27."""


def rms_dbfs(windows: np.ndarray) -> np.ndarray:
    """RMS level of each row in dB relative to full scale, digital silence at SILENCE_DBFS."""
    power = np.mean(np.square(windows, dtype=np.float64), axis=-1)
    with np.errstate(divide="ignore"):
        level = 10.0 * np.log10(power)
    return np.asarray(np.maximum(level, SILENCE_DBFS), dtype=np.float64)


@dataclass
class EnergyState:
    levels: np.ndarray
    """Ring of the last levels (dBFS), NaN where not yet filled."""
    count: int = 0
    """Windows seen so far (the ring index is count % len(levels))."""


class EnergyVAD:
    """Loudness-over-noise-floor speech probability; stateless apart from a level history."""

    name = "energy"

    def __init__(
        self,
        margin_db: float = DEFAULT_MARGIN_DB,
        min_speech_dbfs: float = DEFAULT_MIN_SPEECH_DBFS,
        floor_window_s: float = DEFAULT_FLOOR_WINDOW_S,
    ) -> None:
        if margin_db <= 0 or floor_window_s <= 0:
            raise ValueError("margin_db and floor_window_s must be positive")
        self.margin_db = margin_db
        self.min_speech_dbfs = min_speech_dbfs
        self._history = max(1, round(floor_window_s * 1000 / WINDOW_MS))

    def initial_state(self) -> EnergyState:
        return EnergyState(levels=np.full(self._history, np.nan))

    def predict(
        self, windows: np.ndarray, states: Sequence[EnergyState]
    ) -> tuple[np.ndarray, list[EnergyState]]:
        if windows.ndim != 2 or windows.shape[1] != WINDOW_SAMPLES or windows.shape[0] != len(states):
            raise ValueError(f"expected ({len(states)}, {WINDOW_SAMPLES}) windows, got {windows.shape}")
        levels = rms_dbfs(windows)  # (B,)
        probs = np.empty(len(states), dtype=np.float32)
        for i, (state, level) in enumerate(zip(states, levels, strict=True)):
            state.levels[state.count % self._history] = level
            state.count += 1
            # The current window takes part in the floor, so a stream that opens with speech
            # starts with floor == its own level (not speech) until a quieter window arrives.
            floor = float(np.nanmin(state.levels))
            gate = max(floor + self.margin_db, self.min_speech_dbfs)
            probs[i] = 1.0 / (1.0 + np.exp(-(level - gate) / SLOPE_DB))
        return probs, list(states)
