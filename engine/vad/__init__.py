"""Voice activity: speech probability models, live turn detection, offline segmentation.

    VoiceActivityModel (protocol)  SileroVAD (packaged TorchScript) | EnergyVAD (no deps)
    TurnDetector                   live stream -> SpeechStarted / TurnAudio / SpeechStopped
    speech_segments                whole recording -> [(start_s, end_s)]
"""

from __future__ import annotations

from typing import Literal

from engine.errors import InvalidRequestError
from engine.vad.base import SAMPLE_RATE, WINDOW_MS, WINDOW_SAMPLES, VoiceActivityModel, speech_probs
from engine.vad.energy import EnergyVAD
from engine.vad.segments import speech_segments
from engine.vad.turns import (
    SpeechGate,
    SpeechStarted,
    SpeechStopped,
    TurnAudio,
    TurnDetector,
    TurnEvent,
    TurnSettings,
    feed_many,
)

VadKind = Literal["silero", "energy"]
VAD_KINDS: tuple[VadKind, ...] = ("silero", "energy")

__all__ = [
    "SAMPLE_RATE",
    "VAD_KINDS",
    "WINDOW_MS",
    "WINDOW_SAMPLES",
    "EnergyVAD",
    "SpeechGate",
    "SpeechStarted",
    "SpeechStopped",
    "TurnAudio",
    "TurnDetector",
    "TurnEvent",
    "TurnSettings",
    "VadKind",
    "VoiceActivityModel",
    "feed_many",
    "load_vad_model",
    "speech_probs",
    "speech_segments",
]


def load_vad_model(kind: str = "silero") -> VoiceActivityModel:
    """Build the named VAD model ('silero': packaged Silero network; 'energy': loudness gate)."""
    if kind == "silero":
        from engine.vad.silero import SileroVAD  # torch import only when asked for

        return SileroVAD.load()
    if kind == "energy":
        return EnergyVAD()
    raise InvalidRequestError(f"unknown VAD model {kind!r}; choose one of {', '.join(VAD_KINDS)}")
