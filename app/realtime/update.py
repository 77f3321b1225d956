"""`session.update` (GA) and `transcription_session.update` (beta) -> SessionConfig.

An update is validated whole before anything applies, so a rejected update changes nothing.
Fields left out keep their value; a `turn_detection` object is taken whole (its knobs left out
are the server's defaults). Validation follows OpenAI's: a keyword holding `<`, `>` or a line
break rejects the update, and `language` with `languages` is an error.
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_args

from app.realtime.config import (
    BETA_NAMES,
    DEFAULT_PCM_RATE_HZ,
    G711_RATE_HZ,
    GA_TYPES,
    LOGPROBS,
    PCM_RATES_HZ,
    TENTATIVE,
    Eagerness,
    InputFormat,
    NoiseKind,
    NoiseReduction,
    SessionConfig,
    TranscriptionConfig,
    TurnDetection,
    VadSettings,
)
from app.realtime.design_keys import apply_design_keys
from app.realtime.events import ProtocolError
from engine.types import DELAYS, MAX_KEYWORD_CHARS, MAX_KEYWORDS

# Fields of OpenAI's VAD objects that only steer a voice model's responses; accepted and ignored.
_RESPONSE_FIELDS = frozenset({"create_response", "interrupt_response"})
_SERVER_VAD_FIELDS = frozenset({"type", "threshold", "prefix_padding_ms", "silence_duration_ms", "idle_timeout_ms"})
MIN_IDLE_TIMEOUT_MS = 1000
MAX_VAD_MS = 60_000
MAX_IDLE_TIMEOUT_MS = 3_600_000
KEYWORD_FORBIDDEN = ("<", ">", "\n", "\r")


def _invalid(message: str, param: str, code: str = "invalid_value") -> ProtocolError:
    return ProtocolError(message, code=code, param=param)


def _object(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _invalid(f"{param} must be an object, got {type(value).__name__}", param)
    return value


def parse_ga_update(event: dict[str, Any], current: SessionConfig, vad: VadSettings) -> SessionConfig:
    """`session.update` (GA shape) applied to `current`."""
    session = _object(event.get("session"), "session")
    session_type = session.get("type", "transcription")
    if session_type != "transcription":
        raise _invalid(f"this server serves transcription sessions only; session.type must be "
                       f"'transcription', got {session_type!r}", "session.type", "unsupported_session_type")
    config = current
    audio = _object(session.get("audio", {}), "session.audio")
    inp = _object(audio.get("input", {}), "session.audio.input")
    param = "session.audio.input"
    if "format" in inp:
        config = dataclasses.replace(config, input_format=_ga_format(inp["format"]))
    if "turn_detection" in inp:
        config = dataclasses.replace(config, turn_detection=_turn_detection(
            inp["turn_detection"], f"{param}.turn_detection", vad))
    if "transcription" in inp:
        config = dataclasses.replace(config, transcription=_transcription(
            inp["transcription"], current.transcription, f"{param}.transcription"))
    if "noise_reduction" in inp:
        config = dataclasses.replace(config, noise_reduction=_noise_reduction(
            inp["noise_reduction"], current.noise_reduction, f"{param}.noise_reduction"))
    if "include" in session:
        logprobs, tentative = _include(session["include"])
        config = dataclasses.replace(config, logprobs=logprobs, tentative=tentative)
    return apply_design_keys(session, config, format_given="format" in inp)


def parse_beta_update(event: dict[str, Any], current: SessionConfig, vad: VadSettings) -> SessionConfig:
    """`transcription_session.update` (beta shape) applied to `current`."""
    session = _object(event.get("session"), "session")
    config = current
    if "input_audio_format" in session:
        config = dataclasses.replace(config, input_format=_beta_format(session["input_audio_format"]))
    if "turn_detection" in session:
        config = dataclasses.replace(config, turn_detection=_turn_detection(
            session["turn_detection"], "session.turn_detection", vad))
    if "input_audio_transcription" in session:
        config = dataclasses.replace(config, transcription=_transcription(
            session["input_audio_transcription"], current.transcription, "session.input_audio_transcription"))
    if "input_audio_noise_reduction" in session:
        config = dataclasses.replace(config, noise_reduction=_noise_reduction(
            session["input_audio_noise_reduction"], current.noise_reduction, "session.input_audio_noise_reduction"))
    if "include" in session:
        logprobs, tentative = _include(session["include"])
        config = dataclasses.replace(config, logprobs=logprobs, tentative=tentative)
    return apply_design_keys(session, config, format_given="input_audio_format" in session)


def _ga_format(value: Any) -> InputFormat:
    param = "session.audio.input.format"
    fmt = _object(value, param)
    kind = fmt.get("type", "audio/pcm")
    encoding = GA_TYPES.get(kind) if isinstance(kind, str) else None
    if encoding is None:
        raise _invalid(f"{param}.type must be one of {', '.join(GA_TYPES)} (headerless audio; POST files to "
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
    encoding = BETA_NAMES.get(value) if isinstance(value, str) else None
    if encoding is None:
        raise _invalid(f"input_audio_format must be one of {', '.join(BETA_NAMES)}, got {value!r}",
                       "session.input_audio_format")
    return InputFormat(encoding, DEFAULT_PCM_RATE_HZ if encoding == "pcm16" else G711_RATE_HZ)


def _int_ms(td: dict[str, Any], key: str, param: str, low: int, high: int) -> int | None:
    value = td.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(f"{key} must be an integer number of milliseconds in [{low}, {high}], got {value!r}",
                       f"{param}.{key}")
    return value


def _turn_detection(value: Any, param: str, vad: VadSettings) -> TurnDetection | None:
    """Server or semantic VAD, or None for manual commits (null)."""
    if value is None:
        return None
    td = _object(value, param)
    kind = td.get("type", "server_vad")
    if kind == "semantic_vad":
        unknown = set(td) - {"type", "eagerness"} - _RESPONSE_FIELDS
        if unknown:
            raise _invalid(f"unknown semantic_vad field(s): {', '.join(sorted(unknown))}", param, "unknown_parameter")
        eagerness = td.get("eagerness") or "auto"
        if eagerness not in get_args(Eagerness):
            raise _invalid(f"eagerness must be one of {', '.join(get_args(Eagerness))}, got {eagerness!r}",
                           f"{param}.eagerness")
        return dataclasses.replace(vad.detection(), type="semantic_vad", eagerness=eagerness)
    if kind != "server_vad":
        raise _invalid(f"turn detection {kind!r} is not supported; use 'server_vad', 'semantic_vad' or null "
                       "(manual commits)", f"{param}.type", "unsupported_turn_detection")
    unknown = set(td) - _SERVER_VAD_FIELDS - _RESPONSE_FIELDS
    if unknown:
        raise _invalid(f"unknown turn_detection field(s): {', '.join(sorted(unknown))}", param, "unknown_parameter")
    detection = vad.detection()
    threshold = td.get("threshold")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold < 1.0:
            raise _invalid(f"threshold must be a number in (0, 1), got {threshold!r}", f"{param}.threshold")
        detection = dataclasses.replace(detection, threshold=float(threshold))
    for key in ("prefix_padding_ms", "silence_duration_ms"):
        ms = _int_ms(td, key, param, 0, MAX_VAD_MS)
        if ms is not None:
            detection = dataclasses.replace(detection, **{key: ms})
    idle = _int_ms(td, "idle_timeout_ms", param, MIN_IDLE_TIMEOUT_MS, MAX_IDLE_TIMEOUT_MS)
    return dataclasses.replace(detection, idle_timeout_ms=idle)


def _string(tc: dict[str, Any], key: str, param: str) -> str | None:
    v = tc[key]
    if v is not None and not isinstance(v, str):
        raise _invalid(f"{param}.{key} must be a string, got {type(v).__name__}", f"{param}.{key}")
    return v or None


def _strings(tc: dict[str, Any], key: str, param: str) -> tuple[str, ...]:
    v = tc[key]
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise _invalid(f"{param}.{key} must be an array of strings", f"{param}.{key}")
    return tuple(s.strip() for s in v if s.strip())


def _transcription(value: Any, current: TranscriptionConfig, param: str) -> TranscriptionConfig:
    if value is None:
        return TranscriptionConfig()
    tc = _object(value, param)
    if tc.get("language") is not None and tc.get("languages"):
        raise _invalid("give either language or languages, not both", f"{param}.languages")
    config = current
    if "language" in tc or "languages" in tc:  # one replaces the other
        config = dataclasses.replace(config, language=None, languages=())
    for key in ("model", "language", "prompt"):
        if key in tc:
            config = dataclasses.replace(config, **{key: _string(tc, key, param)})
    if "languages" in tc:
        config = dataclasses.replace(config, languages=_strings(tc, "languages", param))
    if "keywords" in tc:
        config = dataclasses.replace(config, keywords=_keywords(_strings(tc, "keywords", param), f"{param}.keywords"))
    if "delay" in tc:
        delay = tc["delay"]
        if delay is not None and delay not in DELAYS:
            raise _invalid(f"delay must be one of {', '.join(DELAYS)}, got {delay!r}", f"{param}.delay")
        config = dataclasses.replace(config, delay=delay)
    if "stream_context" in tc:
        config = dataclasses.replace(config, stream_context=_stream_context(tc["stream_context"], f"{param}.stream_context"))
    return config


def _stream_context(value: Any, param: str) -> tuple[int, int, int] | None:
    """[left, chunk, right] in encoder frames; whether the model trained it is the engine's check."""
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
        raise _invalid("stream_context must be [left, chunk, right]: three non-negative integers", param)
    left, chunk, right = value
    return (left, chunk, right)


def _keywords(words: tuple[str, ...], param: str) -> tuple[str, ...]:
    if len(words) > MAX_KEYWORDS:
        raise _invalid(f"at most {MAX_KEYWORDS} keywords, got {len(words)}", param)
    for i, word in enumerate(words):
        if any(ch in word for ch in KEYWORD_FORBIDDEN):
            raise _invalid(f"keyword {i} ({word[:40]!r}) contains '<', '>' or a line break", f"{param}[{i}]")
        if len(word) > MAX_KEYWORD_CHARS:
            raise _invalid(f"keyword {i} is longer than {MAX_KEYWORD_CHARS} characters", f"{param}[{i}]")
    return words


def _noise_reduction(value: Any, current: NoiseReduction | None, param: str) -> NoiseReduction | None:
    if value is None:
        return None
    nr = _object(value, param)
    kind = nr.get("type", current.type if current else "near_field")
    if kind not in get_args(NoiseKind):
        raise _invalid(f"noise_reduction.type must be one of {', '.join(get_args(NoiseKind))}, got {kind!r}",
                       f"{param}.type")
    strength = nr.get("strength")
    if strength is None:  # left out: keeps the current strength (1 when first enabled)
        strength = current.strength if current else 1.0
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not 0.0 <= strength <= 1.0:
        raise _invalid(f"noise_reduction.strength must be a number in [0, 1], got {strength!r}", f"{param}.strength")
    return NoiseReduction(kind, float(strength))


def _include(value: Any) -> tuple[bool, bool]:
    """(logprobs, tentative) from `include`."""
    if value is None:
        return False, False
    if not isinstance(value, list) or any(v not in (LOGPROBS, TENTATIVE) for v in value):
        raise _invalid(f"include accepts {LOGPROBS!r} and {TENTATIVE!r} (OASR extension), got {value!r}",
                       "session.include")
    return LOGPROBS in value, TENTATIVE in value
