"""What language a checkpoint's vocabulary says it transcribes, for families whose checkpoints do
not record one (WeNet): a vocabulary that spells only with the English alphabet is English, so a
request naming `en` (which many clients always send) is served rather than refused."""

from __future__ import annotations

import re
from collections.abc import Iterable

_SPECIAL = re.compile(r"^<[^>]*>$")
"""`<blank>`, `<unk>`, `<sos/eos>` and the like: no letters of the language."""
_MARKERS = ("▁", "@@", "#")
MIN_LETTER_UNITS = 20
"""Fewer units with letters than this (a toy vocabulary) say nothing about a language."""


def vocabulary_language(units: Iterable[str]) -> str | None:
    """'en' when every letter of every unit is an ASCII letter (a-z, A-Z) and enough units have
    letters; None when the vocabulary has other letters (accents, other scripts) or too few."""
    with_letters = 0
    for unit in units:
        if _SPECIAL.match(unit):
            continue
        for marker in _MARKERS:
            unit = unit.replace(marker, "")
        letters = [ch for ch in unit if ch.isalpha()]
        if not letters:
            continue
        if not all(ch.isascii() for ch in letters):
            return None
        with_letters += 1
    return "en" if with_letters >= MIN_LETTER_UNITS else None
