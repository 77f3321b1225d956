"""A session's transcription settings -> the engine's DecodingOptions, checked against the model.

Shared by a live session's `session.update` and by the routes that mint client secrets, so a
secret never carries a configuration its session would refuse.
"""

from __future__ import annotations

import dataclasses

from app.realtime.config import TranscriptionConfig
from app.realtime.events import ProtocolError
from app.requests import (
    OPTION_FIELDS,
    ModelNotFound,
    OptionsChecker,
    admit_options,
    build_options,
    check_model,
)
from engine import DecodingOptions
from engine.errors import InvalidRequestError


def decoding_options(tc: TranscriptionConfig, *, logprobs: bool, engine: OptionsChecker,
                     served_model_name: str | None, param: str) -> DecodingOptions:
    """The session's options, built by the one builder (app/requests.build_options) and admitted by
    `engine` (the model's capabilities, a language, keywords past its prompt budget), or a
    ProtocolError naming `param`."""
    try:
        check_model(served_model_name, tc.model or None)
    except ModelNotFound as exc:
        raise ProtocolError(str(exc), code="model_not_found", param=f"{param}.model") from exc
    language = tc.language
    if tc.languages:
        if len(tc.languages) > 1:
            raise ProtocolError("restricting language detection to a list is not supported: give one language "
                                "(language or a one-entry languages), or none to detect it",
                                code="unsupported_value", param=f"{param}.languages")
        language = tc.languages[0]
    try:
        # the session's fields named like an option pass through (prompt, keywords, delay, ...)
        named = {f.name: getattr(tc, f.name) for f in dataclasses.fields(tc) if f.name in OPTION_FIELDS}
        options = build_options(**{**named, "language": language}, logprobs=logprobs)
        options = admit_options(engine, options, streaming=True)
    except InvalidRequestError as exc:
        raise ProtocolError(str(exc), code="invalid_value", param=param) from exc
    return options
