"""`semantic_vad`: how much silence ends a turn, from the transcript so far and `eagerness`.

No end-of-utterance model runs here: the live transcript is the signal. A turn whose text ends
a sentence ('.', '?', '!') ends after half the eagerness' base silence; one that ends mid-clause
(a conjunction, an article, a preposition, a filler such as "um", or a comma) waits four times
as long, up to OpenAI's caps for the eagerness (8 s low, 4 s medium, 2 s high); a completed
clause without punctuation, or a turn with no text yet, takes the base. On an offline-mode
server no partial transcript exists while the turn is open, so the base alone applies.
"""

from __future__ import annotations

import re

from app.realtime.config import Eagerness

BASE_SILENCE_MS: dict[str, int] = {"low": 1500, "medium": 800, "high": 400}
"""Silence that ends a turn when its transcript gives no hint ('auto' is 'medium')."""
MAX_SILENCE_MS: dict[str, int] = {"low": 8000, "medium": 4000, "high": 2000}
SENTENCE_END = (".", "?", "!", "…")
MID_CLAUSE_MARKS = (",", ";", ":", "-", "—")
_DANGLING = """
    a an the and or but so because if that which who whose when while although though than as of to in on at
    for with from by about into like my your his their our its is are was were be been am do does did
    have has had will would can could should i we they he she um uh er erm hmm mm
"""
# ("her", "it", "you" are left out: as objects they end clauses, "I hardly know her")
DANGLING_WORDS = frozenset(_DANGLING.split())
"""Words that leave a clause open when they end the transcript."""
_WORD = re.compile(r"[\w']+")


def _eagerness(eagerness: Eagerness) -> str:
    return "medium" if eagerness == "auto" else eagerness


def base_silence_ms(eagerness: Eagerness) -> int:
    return BASE_SILENCE_MS[_eagerness(eagerness)]


def silence_for(text: str, eagerness: Eagerness) -> int:
    """Silence (ms) that ends a turn whose transcript so far is `text`."""
    level = _eagerness(eagerness)
    base = BASE_SILENCE_MS[level]
    tail = text.rstrip()
    if not tail:
        return base
    if tail.endswith(SENTENCE_END):
        return base // 2
    words = _WORD.findall(tail.lower())
    if tail.endswith(MID_CLAUSE_MARKS) or (words and words[-1] in DANGLING_WORDS):
        return min(base * 4, MAX_SILENCE_MS[level])
    return base
