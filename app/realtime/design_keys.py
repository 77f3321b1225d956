"""The reference design's flat `session.update` keys (its serving document, `GET /v1/realtime`):
`sample_rate`, `encoding`, `language`, `task`, `prompt`, `interim_results`, `model`, given on
the session object itself rather than in OpenAI's nested `audio.input`. Each is honoured, or
refused with a reason, never ignored: a client that declares 16 kHz audio must not be decoded at
OpenAI's default 24 kHz without a word.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.realtime.config import (
    DEFAULT_PCM_RATE_HZ,
    G711_RATE_HZ,
    PCM_RATES_HZ,
    Encoding,
    InputFormat,
    SessionConfig,
)
from app.realtime.events import ProtocolError

_ENCODINGS: dict[str, Encoding] = {
    "pcm16": "pcm16", "pcm_s16le": "pcm16", "s16le": "pcm16", "linear16": "pcm16", "pcm": "pcm16",
    "audio/pcm": "pcm16", "pcmu": "pcmu", "mulaw": "pcmu", "g711_ulaw": "pcmu", "audio/pcmu": "pcmu",
    "pcma": "pcma", "alaw": "pcma", "g711_alaw": "pcma", "audio/pcma": "pcma",
}


def _invalid(message: str, key: str, code: str = "invalid_value") -> ProtocolError:
    return ProtocolError(message, code=code, param=f"session.{key}")


def _format(session: dict[str, Any], current: InputFormat) -> InputFormat:
    raw = session.get("encoding")
    encoding = current.encoding if raw is None else _ENCODINGS.get(str(raw).strip().lower())
    if encoding is None:
        raise _invalid(f"encoding {raw!r} is not taken on this socket: send headerless 16-bit PCM (pcm16, "
                       "linear16) or G.711 (pcmu, pcma)", "encoding", "unsupported_value")
    rate = session.get("sample_rate")
    if encoding != "pcm16":
        if rate not in (None, G711_RATE_HZ):
            raise _invalid(f"G.711 audio is {G711_RATE_HZ} Hz, got sample_rate {rate!r}", "sample_rate")
        return InputFormat(encoding, G711_RATE_HZ)
    if rate is None:
        rate = current.rate if current.encoding == "pcm16" else DEFAULT_PCM_RATE_HZ
    if isinstance(rate, bool) or rate not in PCM_RATES_HZ:
        raise _invalid(f"sample_rate must be one of {', '.join(map(str, PCM_RATES_HZ))} Hz, got {rate!r}",
                       "sample_rate")
    return InputFormat("pcm16", int(rate))


def apply_design_keys(session: dict[str, Any], config: SessionConfig, *, format_given: bool) -> SessionConfig:
    """`config` with the flat keys of `session` applied; ProtocolError for a value that cannot be
    served (and for a format given both flat and nested, which could disagree)."""
    if "sample_rate" in session or "encoding" in session:
        if format_given:
            raise _invalid("give the audio format once: flat sample_rate/encoding or the nested format, not both",
                           "sample_rate")
        config = dataclasses.replace(config, input_format=_format(session, config.input_format))
    transcription = config.transcription
    for key in ("language", "prompt", "model"):
        if key in session:
            value = session[key]
            if value is not None and not isinstance(value, str):
                raise _invalid(f"session.{key} must be a string, got {type(value).__name__}", key)
            fields: dict[str, Any] = {key: value or None}
            if key == "language":
                fields["languages"] = ()
            transcription = dataclasses.replace(transcription, **fields)
    config = dataclasses.replace(config, transcription=transcription)
    task = session.get("task")
    if task not in (None, "transcribe"):
        raise _invalid(f"task {task!r} is not served on live sessions: they transcribe (POST a file to "
                       "/v1/audio/translations to translate)", "task", "unsupported_value")
    if "interim_results" in session:
        interim = session["interim_results"]
        if not isinstance(interim, bool):
            raise _invalid(f"interim_results must be true or false, got {interim!r}", "interim_results")
        config = dataclasses.replace(config, interim=interim)
    return config
