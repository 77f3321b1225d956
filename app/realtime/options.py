"""A session's transcription settings -> the engine's DecodingOptions, checked against the model.

Shared by a live session's `session.update` and by the routes that mint client secrets, so a
secret never carries a configuration its session would refuse.
"""

from __future__ import annotations

from typing import Any

from app.realtime.config import TranscriptionConfig
from app.realtime.events import ProtocolError
from engine import DecodingOptions
from engine.errors import InvalidRequestError


def decoding_options(tc: TranscriptionConfig, *, logprobs: bool, runner: Any, served_model_name: str | None,
                     param: str) -> DecodingOptions:
    """`runner` is the engine's model runner (its `check_options` refuses what the model cannot
    serve: a language, keywords past its prompt budget)."""
    if served_model_name and tc.model and tc.model != served_model_name:
        raise ProtocolError(f"model {tc.model!r} does not exist; this server serves {served_model_name!r}",
                            code="model_not_found", param=f"{param}.model")
    language = tc.language
    if tc.languages:
        if len(tc.languages) > 1:
            raise ProtocolError("restricting language detection to a list is not supported: give one language "
                                "(language or a one-entry languages), or none to detect it",
                                code="unsupported_value", param=f"{param}.languages")
        language = tc.languages[0]
    options = DecodingOptions(task="transcribe", language=language.lower() if language else None, prompt=tc.prompt,
                              keywords=tc.keywords, logprobs=logprobs, delay=tc.delay,
                              stream_context=tc.stream_context)
    try:
        options.validate()
        runner.check_options(options, True)
    except InvalidRequestError as exc:
        raise ProtocolError(str(exc), code="invalid_value", param=param) from exc
    return options
