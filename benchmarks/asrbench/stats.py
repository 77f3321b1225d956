"""Statistics the summaries use: nearest-rank percentiles, IQR, and normalized WER."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

ROUND = 4
"""Decimals kept in summaries: below any timer's resolution that matters, and stable in JSON."""


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least p% of the data at or below it."""
    if not values:
        return None
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {p}")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


def iqr(values: Sequence[float]) -> float | None:
    q1, q3 = percentile(values, 25), percentile(values, 75)
    return None if q1 is None or q3 is None else q3 - q1


def rnd(x: float | None) -> float | None:
    return None if x is None else round(float(x), ROUND)


def distribution(values: Sequence[float], prefix: str) -> dict[str, Any]:
    """p50/p90/p99/mean of `values` under `prefix_*` keys (None when empty)."""
    return {
        f"{prefix}_p50": rnd(percentile(values, 50)),
        f"{prefix}_p90": rnd(percentile(values, 90)),
        f"{prefix}_p99": rnd(percentile(values, 99)),
        f"{prefix}_mean": rnd(sum(values) / len(values)) if values else None,
    }


NORMALIZERS = ("english", "basic", "none")
"""english: Whisper's English normaliser (English-specific rules); basic: Whisper's
language-neutral one (lower case, no punctuation or diacritics); none: whitespace only."""


@lru_cache(maxsize=2)
def _normalizer(name: str) -> Any:
    if name == "english":
        from whisper_normalizer.english import EnglishTextNormalizer

        return EnglishTextNormalizer()
    if name == "basic":
        from whisper_normalizer.basic import BasicTextNormalizer

        return BasicTextNormalizer()
    if name == "none":
        return lambda text: text
    raise ValueError(f"unknown normaliser {name!r}; known: {NORMALIZERS}")


def normalize(text: str, normalizer: str = "english") -> str:
    return " ".join(_normalizer(normalizer)(text).split())


def wer(references: Sequence[str], hypotheses: Sequence[str], normalizer: str = "english") -> dict[str, Any]:
    """Corpus WER (errors / reference words) after the normaliser (Whisper's English one by
    default), plus the share of empty hypotheses. References that normalize to nothing are left out."""
    import jiwer

    pairs = [(normalize(r, normalizer), normalize(h, normalizer)) for r, h in zip(references, hypotheses, strict=True)]
    pairs = [(r, h) for r, h in pairs if r]
    if not pairs:
        return {"wer": None, "empty_rate": None, "n_scored": 0}
    empty = sum(1 for _, h in pairs if not h)
    out = jiwer.process_words([r for r, _ in pairs], [h for _, h in pairs])
    errors = out.substitutions + out.deletions + out.insertions
    words = out.hits + out.substitutions + out.deletions
    return {"wer": rnd(errors / words), "empty_rate": rnd(empty / len(pairs)), "n_scored": len(pairs)}
