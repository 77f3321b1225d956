"""Language codes: the one normaliser every surface's language goes through (a request's tag ->
the ISO 639 code models know), and what language a checkpoint's vocabulary says it transcribes,
for families whose checkpoints do not record one (WeNet): a vocabulary that spells only with the
English alphabet is English, so a request naming `en` (which many clients always send) is served
rather than refused."""

from __future__ import annotations

import re
from collections.abc import Iterable

from engine.errors import InvalidRequestError

_TAG = re.compile(r"^(?P<primary>[A-Za-z]{2,3})([-_][A-Za-z0-9]{1,8})*$")
"""A BCP-47 tag ('en', 'en-US', 'zh-Hans-CN'), '_' also accepted between subtags ('pt_BR')."""
_SPECIAL = re.compile(r"^<[^>]*>$")
"""`<blank>`, `<unk>`, `<sos/eos>` and the like: no letters of the language."""
_MARKERS = ("▁", "@@", "#")
MIN_LETTER_UNITS = 20
"""Fewer units with letters than this (a toy vocabulary) say nothing about a language."""


def language_code(tag: str | None, name: str = "language") -> str | None:
    """A request's language -> the ISO 639 code models know: a BCP-47 tag keeps its primary
    subtag, lower-cased ('en-US' -> 'en', 'pt_BR' -> 'pt'); None or blank means detect.
    InvalidRequestError naming the surface's parameter `name` for anything that is not a tag."""
    if tag is None or not tag.strip():
        return None
    match = _TAG.match(tag.strip())
    if match is None:
        raise InvalidRequestError(f"{name} {tag!r} is not a BCP-47 language tag such as 'en' or 'en-US'")
    return match["primary"].lower()


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


__all__ = ["MIN_LETTER_UNITS", "language_code", "vocabulary_language"]
