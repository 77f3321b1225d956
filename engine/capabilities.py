"""What a loaded model honours of a request's `DecodingOptions`, and the one check that enforces it.

Every family declares its `Capabilities` in `ModelInfo`; admission (`ASREngine.validate_options`,
used by every surface) refuses an option the model lacks with one message format naming the
family, the model and the option, so no family ignores an option silently and every surface
words the refusal the same way. A family's own `check_options` keeps only the checks on values
that are its own (a chunk size it was not trained for, a prompt over its token budget).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """`temperature > 0` (sampling, fallback ladders)."""
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

    @property
    def beam_search(self) -> bool:
        return self.max_beam_size > 1


def refusal(family: str, model: str, option: str, why: str) -> UnsupportedError:
    """The one wording of a capability refusal, on every surface."""
    return UnsupportedError(f"{option} is not supported by the {family} model {model!r}: {why}")


def check_capabilities(caps: Capabilities, *, family: str, model: str, languages: tuple[str, ...],
                       options: DecodingOptions) -> None:
    """Raise UnsupportedError for the first option in `options` that `caps` does not offer."""

    def refuse(option: str, why: str) -> UnsupportedError:
        return refusal(family, model, option, why)

    if options.beam_size > caps.max_beam_size:
        raise refuse("beam_size", "it decodes greedily only (beam_size 1)" if caps.max_beam_size == 1
                     else f"its largest beam is {caps.max_beam_size}, got {options.beam_size}")
    if options.n_best > caps.max_n_best:
        raise refuse("n_best", "it returns one hypothesis (n_best 1)" if caps.max_n_best == 1
                     else f"it returns at most {caps.max_n_best} alternatives, got {options.n_best}")
    if options.temperature > 0 and not caps.sampling:
        raise refuse("temperature", "it does not sample (temperature must be 0)")
    if options.prompt and not caps.prompt:
        raise refuse("prompt", "it takes no previous-text prompt")
    if options.keywords and not caps.keywords:
        raise refuse("keywords", "it has no keyword biasing")
    if options.logprobs and not caps.logprobs:
        raise refuse("logprobs", "it does not report per-token log-probabilities")
    if options.language is not None and not caps.language:
        sole = languages[0] if len(languages) == 1 else None
        if options.language.lower() != sole:
            fixed = "it is English-only" if sole == "en" else f"it transcribes {sole!r} only"
            raise refuse(f"language {options.language!r}", fixed if sole else "the request cannot choose its language")
    if options.task == "translate" and not caps.translate:
        raise refuse("task='translate'", "it is English-only and only transcribes" if languages == ("en",)
                     else "it only transcribes")
    if options.word_timestamps and not caps.word_timestamps:
        raise refuse("word_timestamps", "it does not time words")
    if options.stream_context is not None and not caps.stream_context:
        raise refuse("stream_context", "it does not re-run a (left, chunk, right) window per step")


__all__ = ["Capabilities", "check_capabilities", "refusal"]
