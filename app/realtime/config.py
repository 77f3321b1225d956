"""Transcription session configuration: parsing both protocol shapes, rendering it back.

    GA    session.update                {session: {type: "transcription", audio: {input: {
                                          format, transcription, turn_detection, noise_reduction}}}}
    beta  transcription_session.update  {session: {input_audio_format, input_audio_transcription,
                                          turn_detection, input_audio_noise_reduction}}

Both parse into one `SessionConfig`. An update is validated whole before anything applies,
so a rejected update changes nothing. Server VAD knobs are server settings: a client may
ask for `server_vad` (with the server's own values) or null (manual commits), nothing else.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from app.realtime.events import ProtocolError

Encoding = Literal["pcm16", "pcmu", "pcma"]

PCM_RATES_HZ = (8000, 16000, 24000, 44100, 48000)
"""Rates accepted for `audio/pcm`; OpenAI's own is 24000, browsers capture at 44.1/48 kHz."""
DEFAULT_PCM_RATE_HZ = 24000
G711_RATE_HZ = 8000

_GA_TYPES: dict[str, Encoding] = {"audio/pcm": "pcm16", "audio/pcmu": "pcmu", "audio/pcma": "pcma"}
_BETA_NAMES: dict[str, Encoding] = {"pcm16": "pcm16", "g711_ulaw": "pcmu", "g711_alaw": "pcma"}


@dataclass(frozen=True)
class InputFormat:
    """Headerless audio the client sends: 16-bit little-endian PCM, or G.711 µ-law / A-law."""

    encoding: Encoding = "pcm16"
    rate: int = DEFAULT_PCM_RATE_HZ

    def ga(self) -> dict[str, Any]:
        ga_type = next(t for t, e in _GA_TYPES.items() if e == self.encoding)
        return {"type": ga_type, "rate": self.rate}

    def beta(self) -> str:
        return next(n for n, e in _BETA_NAMES.items() if e == self.encoding)

    def describe(self) -> str:
        names = {"pcm16": "16-bit PCM", "pcmu": "G.711 µ-law", "pcma": "G.711 A-law"}
        return f"{names[self.encoding]} at {self.rate} Hz"


@dataclass(frozen=True)
class VadSettings:
    """The server's VAD values (from Settings), echoed in `turn_detection`."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500

    def turn_detection(self) -> dict[str, Any]:
        return {"type": "server_vad", "threshold": self.threshold, "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms}


# Each client-settable VAD knob and the server flag / env var that owns it.
VAD_FLAGS = {
    "threshold": ("--vad-threshold", "OASR_VAD_THRESHOLD"),
    "silence_duration_ms": ("--vad-silence-duration-ms", "OASR_VAD_SILENCE_DURATION_MS"),
    "prefix_padding_ms": ("--vad-prefix-padding-ms", "OASR_VAD_PREFIX_PADDING_MS"),
}
# Fields of OpenAI's server_vad object that do not concern transcription; accepted and ignored.
_IGNORED_VAD_FIELDS = frozenset({"create_response", "interrupt_response", "idle_timeout_ms"})


@dataclass(frozen=True)
class TranscriptionConfig:
    model: str | None = None
    language: str | None = None
    prompt: str | None = None

    def render(self) -> dict[str, Any]:
        return {"model": self.model, "language": self.language, "prompt": self.prompt}


@dataclass(frozen=True)
class SessionConfig:
    input_format: InputFormat = InputFormat()
    server_vad: bool = True
    """OpenAI's default for transcription sessions; null turn detection means manual commits."""
    transcription: TranscriptionConfig = TranscriptionConfig()

    def render_ga(self, session_id: str, vad: VadSettings) -> dict[str, Any]:
        return {
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": session_id,
            "audio": {"input": {
                "format": self.input_format.ga(),
                "transcription": self.transcription.render(),
                "turn_detection": vad.turn_detection() if self.server_vad else None,
                "noise_reduction": None,
            }},
            "include": None,
        }

    def render_beta(self, session_id: str, vad: VadSettings) -> dict[str, Any]:
        return {
            "id": session_id,
            "object": "realtime.transcription_session",
            "input_audio_format": self.input_format.beta(),
            "input_audio_transcription": self.transcription.render(),
            "turn_detection": vad.turn_detection() if self.server_vad else None,
            "input_audio_noise_reduction": None,
            "include": None,
        }


def _invalid(message: str, param: str, code: str = "invalid_value") -> ProtocolError:
    return ProtocolError(message, code=code, param=param)


def _object(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _invalid(f"{param} must be an object, got {type(value).__name__}", param)
    return value


def parse_ga_update(event: dict[str, Any], current: SessionConfig, vad: VadSettings) -> SessionConfig:
    """`session.update` (GA shape) applied to `current`; fields left out keep their value."""
    session = _object(event.get("session"), "session")
    session_type = session.get("type", "transcription")
    if session_type != "transcription":
        raise _invalid(f"this server serves transcription sessions only; session.type must be "
                       f"'transcription', got {session_type!r}", "session.type", "unsupported_session_type")
    config = current
    audio = _object(session.get("audio", {}), "session.audio")
    inp = _object(audio.get("input", {}), "session.audio.input")
    if "format" in inp:
        config = dataclasses.replace(config, input_format=_ga_format(inp["format"]))
    if "turn_detection" in inp:
        server_vad = _turn_detection(inp["turn_detection"], "session.audio.input.turn_detection", vad)
        config = dataclasses.replace(config, server_vad=server_vad)
    if "transcription" in inp:
        config = dataclasses.replace(config, transcription=_transcription(
            inp["transcription"], current.transcription, "session.audio.input.transcription"))
    return config


def parse_beta_update(event: dict[str, Any], current: SessionConfig, vad: VadSettings) -> SessionConfig:
    """`transcription_session.update` (beta shape) applied to `current`."""
    session = _object(event.get("session"), "session")
    config = current
    if "input_audio_format" in session:
        config = dataclasses.replace(config, input_format=_beta_format(session["input_audio_format"]))
    if "turn_detection" in session:
        config = dataclasses.replace(
            config, server_vad=_turn_detection(session["turn_detection"], "session.turn_detection", vad))
    if "input_audio_transcription" in session:
        config = dataclasses.replace(config, transcription=_transcription(
            session["input_audio_transcription"], current.transcription, "session.input_audio_transcription"))
    return config


def _ga_format(value: Any) -> InputFormat:
    param = "session.audio.input.format"
    fmt = _object(value, param)
    encoding = _GA_TYPES.get(fmt.get("type", "audio/pcm"))
    if encoding is None:
        raise _invalid(f"{param}.type must be one of {', '.join(_GA_TYPES)} (headerless audio; POST files to "
                       f"/v1/audio/transcriptions), got {fmt.get('type')!r}", f"{param}.type")
    rate = fmt.get("rate")
    if encoding != "pcm16":
        if rate not in (None, G711_RATE_HZ):
            raise _invalid(f"{fmt['type']} is {G711_RATE_HZ} Hz, got rate {rate!r}", f"{param}.rate")
        return InputFormat(encoding, G711_RATE_HZ)
    if rate is None:
        rate = DEFAULT_PCM_RATE_HZ
    if isinstance(rate, bool) or rate not in PCM_RATES_HZ:
        raise _invalid(f"audio/pcm rate must be one of {', '.join(map(str, PCM_RATES_HZ))} Hz, got {rate!r}",
                       f"{param}.rate")
    return InputFormat("pcm16", int(rate))


def _beta_format(value: Any) -> InputFormat:
    encoding = _BETA_NAMES.get(value) if isinstance(value, str) else None
    if encoding is None:
        raise _invalid(f"input_audio_format must be one of {', '.join(_BETA_NAMES)}, got {value!r}",
                       "session.input_audio_format")
    return InputFormat(encoding, DEFAULT_PCM_RATE_HZ if encoding == "pcm16" else G711_RATE_HZ)


def _turn_detection(value: Any, param: str, vad: VadSettings) -> bool:
    """True for server VAD, False for manual commits (null)."""
    if value is None:
        return False
    td = _object(value, param)
    kind = td.get("type", "server_vad")
    if kind != "server_vad":
        raise _invalid(f"turn detection {kind!r} is not supported; use 'server_vad' or null (manual commits)",
                       f"{param}.type", "unsupported_turn_detection")
    for key, (flag, env) in VAD_FLAGS.items():
        asked = td.get(key)
        if asked is None:
            continue
        own = getattr(vad, key)
        if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not math.isclose(asked, own):
            raise _invalid(f"{key} is a server setting on this server ({own}); it cannot be changed per "
                           f"session. Omit it, or start the server with {flag} / {env}.",
                           f"{param}.{key}", "server_vad_setting")
    unknown = set(td) - set(VAD_FLAGS) - _IGNORED_VAD_FIELDS - {"type"}
    if unknown:
        raise _invalid(f"unknown turn_detection field(s): {', '.join(sorted(unknown))}", param, "unknown_parameter")
    return True


def _transcription(value: Any, current: TranscriptionConfig, param: str) -> TranscriptionConfig:
    if value is None:
        return TranscriptionConfig()
    tc = _object(value, param)
    fields: dict[str, str | None] = {}
    for key in ("model", "language", "prompt"):
        if key not in tc:
            fields[key] = getattr(current, key)
            continue
        v = tc[key]
        if v is not None and not isinstance(v, str):
            raise _invalid(f"{param}.{key} must be a string, got {type(v).__name__}", f"{param}.{key}")
        fields[key] = v or None
    return TranscriptionConfig(**fields)
