"""What every surface asks of a request before any engine work, in one place and one wording:
is the named model served here, which `DecodingOptions` do the surface's parameters mean, and
will the engine take them (ranges, the model's declared capabilities, the family's own checks,
all through `ASREngine.validate_options`). `build_options` is the one place any surface's
parameters become `DecodingOptions`.

Surface-neutral: it raises the engine's errors (InvalidRequestError, UnsupportedError) and
`ModelNotFound`; each surface renders them in its own protocol (HTTP status and envelope, gRPC
status, realtime error event, Deepgram close frame, job failure). No surface reaches into the
engine's runner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from app.errors import ModelNotFound
from engine import DecodingOptions
from engine.errors import InvalidRequestError
from engine.languages import language_code
from engine.types import Task


class OptionsChecker(Protocol):
    """What admission needs of the engine (ASREngine has it)."""

    def validate_options(self, decoding: DecodingOptions | None, streaming: bool = False) -> DecodingOptions: ...


OPENAI_MODEL_NAMES = frozenset({"whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe",
                                "gpt-realtime-whisper"})  # the last: pipecat's realtime STT default
"""Names OpenAI SDKs and examples send by default: they mean the first model, as no `model` does."""
PROVIDER_MODEL_NAMES = OPENAI_MODEL_NAMES | frozenset({
    # Google's RecognitionConfig.model values
    "default", "latest_long", "latest_short", "phone_call", "video", "command_and_search",
    # Deepgram's model names (livekit-plugins-deepgram and pipecat send nova-3 / nova-2 by default)
    "nova-3", "nova-3-general", "nova-2", "nova-2-general", "nova", "enhanced", "base",
})
"""The hosted services' own model names, which their client libraries send by default: they mean
the first model. Any other name a server does not serve is refused (404 `model_not_found`)."""


def check_model(served_model_name: str | None, model: str | None) -> None:
    """ModelNotFound when `model` names another model than the one served (a server without a
    served name answers to any name; a provider's default name always means the served model)."""
    if served_model_name and model and model != served_model_name and model not in PROVIDER_MODEL_NAMES:
        raise ModelNotFound(model, served_model_name)


def pick_model(names: Sequence[str], model: str | None, *, served_model_name: str | None = None) -> str:
    """Which of the served models `names` (the first is the default; for one model, also its other
    names such as the checkpoint's) a request's `model` means: none, a provider's default name or
    `served_model_name` is the first, a listed name itself. ModelNotFound for any other name."""
    if not model or model in PROVIDER_MODEL_NAMES or model == served_model_name:
        return names[0]
    if model in names:
        return model
    raise ModelNotFound(model, names)


OPTION_FIELDS: frozenset[str] = frozenset(f.name for f in dataclasses.fields(DecodingOptions))
"""`DecodingOptions`' field names: a surface's parameter of the same name passes through as it is
(Google's DecodingExtensions, a realtime session's transcription), so a new option reaches them
without a line here or in their converters."""


def build_options(*, task: str | None = None, language: str | None = None, prompt: str | None = None,
                  temperature: float | None = None, beam_size: int | None = None, n_best: int | None = None,
                  language_param: str = "language", **more: Any) -> DecodingOptions:
    """The one way a surface's parameters become DecodingOptions, range-checked; InvalidRequestError
    names the first bad value. Any field may be given (`more` takes the rest of DecodingOptions'
    fields by name); None, and a surface's empty value for prompt, language and task, mean the
    field's default, so a client that sends every field at its zero value asks for nothing. The
    language goes through the one normaliser (`engine.languages.language_code`: 'en-US' -> 'en'),
    whose refusal names the surface's parameter `language_param`."""
    beam = beam_size or 1
    if n_best is not None and n_best > 1:
        beam = max(beam, n_best)  # alternatives are the beam's n-best list
    task = task or "transcribe"
    if task not in ("transcribe", "translate"):
        raise InvalidRequestError(f"task must be 'transcribe' or 'translate', got {task!r}")
    task_name: Task = "translate" if task == "translate" else "transcribe"
    given = {name: value for name, value in more.items() if value is not None}
    options = DecodingOptions(task=task_name, language=language_code(language, language_param), prompt=prompt or None,
                              temperature=float(temperature) if temperature is not None else 0.0,
                              beam_size=beam, n_best=n_best or 1, **given)
    options.validate()
    return options


def admit_options(engine: OptionsChecker, options: DecodingOptions, *, streaming: bool = False) -> DecodingOptions:
    """The options as the engine will admit them, or its refusal (InvalidRequestError /
    UnsupportedError with one message per capability, the same on every surface)."""
    return engine.validate_options(options, streaming)


__all__ = ["OPENAI_MODEL_NAMES", "OPTION_FIELDS", "PROVIDER_MODEL_NAMES", "ModelNotFound", "OptionsChecker", "admit_options", "build_options",
           "check_model", "pick_model"]
