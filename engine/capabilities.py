"""What a loaded model honours of a request's `DecodingOptions`, and the one check that enforces it.

Every family declares its `Capabilities` in `ModelInfo`; admission (`ASREngine.validate_options`,
used by every surface) refuses an option the model lacks with one message format naming the
family, the model and the option, so no family ignores an option silently and every surface
words the refusal the same way. A family's own `check_options` keeps only the checks on values
that are its own (a chunk size it was not trained for, a prompt over its token budget).

Every `DecodingOptions` field is either in `UNIVERSAL` (served by every family) or governed by
one capability in `OPTION_CAPABILITY`; tests/engine/test_capabilities_contract.py fails for a
field that is neither, so a new option cannot be ignored silently by a family that never reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import UnsupportedError
from engine.types import DecodingOptions


@dataclass(frozen=True)
class Capabilities:
    """Which per-request `DecodingOptions` a loaded model honours. Admission refuses a request that
    uses one the model lacks (one message naming the family and the option), so no family ignores
    an option silently. Defaults are the most restrictive: a family states what it can do."""

    max_beam_size: int = 1
    """Largest `beam_size` served; 1 decodes greedily only."""
    max_n_best: int = 1
    """Largest `n_best` (alternatives in `RequestOutput.nbest`)."""
    sampling: bool = False
    """`temperature > 0` (sampling, fallback ladders) and what shapes a sample: `best_of`,
    `top_k`, `top_p`, `seed`, `temperature_fallback`."""
    prompt: bool = False
    """A previous-text `prompt` conditions decoding."""
    keywords: bool = False
    """`keywords` bias recognition (prompting or contextual biasing)."""
    logprobs: bool = False
    """Per-token log-probabilities (`logprobs=True`)."""
    language: bool = False
    """The request may choose the language. Without it, `language` is accepted only when it names
    the model's one declared language (ModelInfo.languages) and refused otherwise."""
    translate: bool = False
    """`task='translate'`."""
    word_timestamps: bool = False
    """Per-word times (`word_timestamps=True`)."""
    stream_context: bool = False
    """A per-stream (left, chunk, right) buffered-streaming context (`stream_context`)."""
    max_new_tokens: bool = False
    """A per-request cap on generated tokens (`max_new_tokens`): autoregressive decoders."""
    no_speech: bool = False
    """A no-speech probability per window, which `no_speech_threshold` turns into silence."""
    previous_text: bool = False
    """Long-form windows prompted with the text before them (`condition_on_previous_text`)."""
    delay: bool = False
    """`delay` picks one of the model's streaming latency settings per stream."""

    @property
    def beam_search(self) -> bool:
        return self.max_beam_size > 1


UNIVERSAL: frozenset[str] = frozenset()
"""`DecodingOptions` fields every family serves at any value. None today: `task` and `language`
are universal only at their defaults, which is what a capability with a default says."""

OPTION_CAPABILITY: Mapping[str, str] = {
    "beam_size": "max_beam_size",
    "n_best": "max_n_best",
    "temperature": "sampling",
    "prompt": "prompt",
    "keywords": "keywords",
    "logprobs": "logprobs",
    "language": "language",
    "task": "translate",
    "word_timestamps": "word_timestamps",
    "stream_context": "stream_context",
    "temperature_fallback": "sampling",
    "best_of": "sampling",
    "top_k": "sampling",
    "top_p": "sampling",
    "seed": "sampling",
    "max_new_tokens": "max_new_tokens",
    "no_speech_threshold": "no_speech",
    "condition_on_previous_text": "previous_text",
    "delay": "delay",
}
"""The `Capabilities` field that governs each other `DecodingOptions` field: a model without it
serves the option at its default only (and at `SERVED_WITHOUT`'s values). In the order
`check_capabilities` checks them, so a request with several refused options hears of the first."""

SERVED_WITHOUT: Mapping[str, tuple[Any, ...]] = {
    "prompt": ("",),  # an empty prompt asks for nothing
    "temperature_fallback": (False,),  # no ladder without sampling: off is what such a model does
    "condition_on_previous_text": (False,),  # no long-form prompting: off is what such a model does
    "no_speech_threshold": (1.0,),  # nothing is silence at 1.0: what a model without the probability does
}
"""Values other than the default that a model without the capability serves all the same,
because they ask for what it does anyway. So the Whisper defaults `temperature_fallback=True`
and `condition_on_previous_text=True` (which clients send without choosing them) and their
opposites are both served everywhere: neither can ask a greedy CTC model for something else."""

WHY: Mapping[str, str] = {
    "temperature": "it does not sample (temperature must be 0)",
    "temperature_fallback": "it does not sample, so it has no temperature fallback",
    "best_of": "it does not sample, so it draws no candidates",
    "top_k": "it does not sample",
    "top_p": "it does not sample",
    "seed": "it does not sample, so there is nothing to seed",
    "prompt": "it takes no previous-text prompt",
    "keywords": "it has no keyword biasing",
    "logprobs": "it does not report per-token log-probabilities",
    "word_timestamps": "it does not time words",
    "stream_context": "it does not re-run a (left, chunk, right) window per step",
    "max_new_tokens": "it does not generate tokens one by one (its output length follows the audio)",
    "no_speech_threshold": "it has no no-speech probability to threshold",
    "condition_on_previous_text": "it does not prompt a window with the text before it",
    "delay": "its streaming has no latency settings to choose from",
}
"""The reason each plain (on/off) capability refusal gives; beam_size, n_best, language and task
are worded from their values (`check_capabilities`)."""

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DecodingOptions)}


def refusal(family: str, model: str, option: str, why: str) -> UnsupportedError:
    """The one wording of a capability refusal, on every surface."""
    return UnsupportedError(f"{option} is not supported by the {family} model {model!r}: {why}")


def asks(options: DecodingOptions, name: str) -> bool:
    """Whether `options` sets field `name` to a value only a model with its capability serves."""
    value = getattr(options, name)
    return value != _DEFAULTS[name] and value not in SERVED_WITHOUT.get(name, ())


def check_capabilities(caps: Capabilities, *, family: str, model: str, languages: tuple[str, ...],
                       options: DecodingOptions) -> None:
    """Raise UnsupportedError for the first option in `options` that `caps` does not offer."""

    def refuse(option: str, why: str) -> UnsupportedError:
        return refusal(family, model, option, why)

    for name, capability in OPTION_CAPABILITY.items():
        if name == "beam_size" and options.beam_size > caps.max_beam_size:
            raise refuse(name, "it decodes greedily only (beam_size 1)" if caps.max_beam_size == 1
                         else f"its largest beam is {caps.max_beam_size}, got {options.beam_size}")
        if name == "n_best" and options.n_best > caps.max_n_best:
            raise refuse(name, "it returns one hypothesis (n_best 1)" if caps.max_n_best == 1
                         else f"it returns at most {caps.max_n_best} alternatives, got {options.n_best}")
        if name == "language" and options.language is not None and not caps.language:
            sole = languages[0] if len(languages) == 1 else None
            if options.language.lower() != sole:
                fixed = "it is English-only" if sole == "en" else f"it transcribes {sole!r} only"
                raise refuse(f"language {options.language!r}", fixed if sole else "the request cannot choose its language")
        if name == "task" and options.task == "translate" and not caps.translate:
            raise refuse("task='translate'", "it is English-only and only transcribes" if languages == ("en",)
                         else "it only transcribes")
        if name in WHY and not getattr(caps, capability) and asks(options, name):
            raise refuse(name, WHY[name])

__all__ = ["OPTION_CAPABILITY", "SERVED_WITHOUT", "UNIVERSAL", "WHY", "Capabilities", "asks", "check_capabilities",
           "refusal"]
