"""Transcription session configuration, and how it renders in both protocol shapes.

    GA    {type: "transcription", audio: {input: {format, transcription, turn_detection,
           noise_reduction}}, include}
    beta  {input_audio_format, input_audio_transcription, turn_detection,
           input_audio_noise_reduction, include}

Both parse (update.py) into one `SessionConfig`. The server's VAD settings are the defaults of
`turn_detection`; a session may set its own threshold, padding and silence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine.types import Delay

Encoding = Literal["pcm16", "pcmu", "pcma"]
Eagerness = Literal["low", "medium", "high", "auto"]
NoiseKind = Literal["near_field", "far_field"]

PCM_RATES_HZ = (8000, 16000, 24000, 44100, 48000)
"""Rates accepted for `audio/pcm`; OpenAI's own is 24000, browsers capture at 44.1/48 kHz."""
DEFAULT_PCM_RATE_HZ = 24000
G711_RATE_HZ = 8000
LOGPROBS = "item.input_audio_transcription.logprobs"
"""OpenAI's `include` value: token log-probabilities on deltas and completed transcripts."""
TENTATIVE = "item.input_audio_transcription.tentative"
"""OASR's `include` value: a delta event for every interim result, carrying the text that may
still change in `tentative` (its `delta` stays append-only, often empty)."""

GA_TYPES: dict[str, Encoding] = {"audio/pcm": "pcm16", "audio/pcmu": "pcmu", "audio/pcma": "pcma"}
BETA_NAMES: dict[str, Encoding] = {"pcm16": "pcm16", "g711_ulaw": "pcmu", "g711_alaw": "pcma"}


@dataclass(frozen=True)
class InputFormat:
    """Headerless audio the client sends: 16-bit little-endian PCM, or G.711 µ-law / A-law."""

    encoding: Encoding = "pcm16"
    rate: int = DEFAULT_PCM_RATE_HZ

    def ga(self) -> dict[str, Any]:
        ga_type = next(t for t, e in GA_TYPES.items() if e == self.encoding)
        return {"type": ga_type, "rate": self.rate}

    def beta(self) -> str:
        return next(n for n, e in BETA_NAMES.items() if e == self.encoding)

    def describe(self) -> str:
        names = {"pcm16": "16-bit PCM", "pcmu": "G.711 µ-law", "pcma": "G.711 A-law"}
        return f"{names[self.encoding]} at {self.rate} Hz"


@dataclass(frozen=True)
class TurnDetection:
    """Server-side turn detection of a session: `server_vad` (silence ends a turn) or
    `semantic_vad` (the silence needed depends on the transcript so far and `eagerness`)."""

    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: float = 0.5
    """Speech probability at which a 32 ms window is speech."""
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    idle_timeout_ms: int | None = None
    """server_vad: audio time without speech after which `input_audio_buffer.timeout_triggered`."""
    eagerness: Eagerness = "auto"
    """semantic_vad: how soon a turn ends ('auto' is 'medium')."""

    def render(self) -> dict[str, Any]:
        if self.type == "semantic_vad":
            return {"type": "semantic_vad", "eagerness": self.eagerness}
        return {"type": "server_vad", "threshold": self.threshold, "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms, "idle_timeout_ms": self.idle_timeout_ms}


@dataclass(frozen=True)
class VadSettings:
    """The server's VAD values (from Settings): the defaults of a session's `server_vad`."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500

    def detection(self) -> TurnDetection:
        return TurnDetection("server_vad", self.threshold, self.prefix_padding_ms, self.silence_duration_ms)


@dataclass(frozen=True)
class NoiseReduction:
    type: NoiseKind = "near_field"
    strength: float = 1.0
    """Suppression in [0, 1]: the fraction of the noise the spectral gate takes out."""

    def render(self) -> dict[str, Any]:
        return {"type": self.type, "strength": self.strength}


@dataclass(frozen=True)
class TranscriptionConfig:
    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    languages: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    delay: Delay | None = None
    stream_context: tuple[int, int, int] | None = None
    """Buffered streaming's window (left, chunk, right) in encoder frames (OASR extension)."""

    def render(self) -> dict[str, Any]:
        return {"model": self.model, "language": self.language, "prompt": self.prompt,
                "languages": list(self.languages) or None, "keywords": list(self.keywords) or None,
                "delay": self.delay, "stream_context": list(self.stream_context) if self.stream_context else None}


@dataclass(frozen=True)
class SessionConfig:
    input_format: InputFormat = InputFormat()
    turn_detection: TurnDetection | None = TurnDetection()
    """OpenAI's default for transcription sessions is server VAD; None means manual commits."""
    transcription: TranscriptionConfig = TranscriptionConfig()
    noise_reduction: NoiseReduction | None = None
    logprobs: bool = False
    """`include: ["item.input_audio_transcription.logprobs"]`."""
    tentative: bool = False
    """`include: ["item.input_audio_transcription.tentative"]` (OASR extension)."""
    interim: bool = True
    """The reference design's `interim_results`: False sends an item's text only with its final."""

    def include(self) -> list[str] | None:
        values = [v for v, on in ((LOGPROBS, self.logprobs), (TENTATIVE, self.tentative)) if on]
        return values or None

    @property
    def server_vad(self) -> bool:
        """Turns are cut by the server (server or semantic VAD), not by the client's commits."""
        return self.turn_detection is not None

    def render_ga(self, session_id: str) -> dict[str, Any]:
        return {
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": session_id,
            "audio": {"input": {
                "format": self.input_format.ga(),
                "transcription": self.transcription.render(),
                "turn_detection": self.turn_detection.render() if self.turn_detection else None,
                "noise_reduction": self.noise_reduction.render() if self.noise_reduction else None,
            }},
            "include": self.include(),
        }

    def render_beta(self, session_id: str) -> dict[str, Any]:
        return {
            "id": session_id,
            "object": "realtime.transcription_session",
            "input_audio_format": self.input_format.beta(),
            "input_audio_transcription": self.transcription.render(),
            "turn_detection": self.turn_detection.render() if self.turn_detection else None,
            "input_audio_noise_reduction": self.noise_reduction.render() if self.noise_reduction else None,
            "include": self.include(),
        }

    def render(self, session_id: str, beta: bool) -> dict[str, Any]:
        return self.render_beta(session_id) if beta else self.render_ga(session_id)
