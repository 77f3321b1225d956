"""SentencePiece output as words: the grouping every family with a '▁'-marked vocabulary shares
(NeMo, Zipformer)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from engine.types import Word

WORD_START = "▁"
"""SentencePiece's word-boundary marker: a piece that starts with it opens a word."""


def piece_words(pieces: Sequence[str], text: Callable[[list[int]], str], tokens: list[int], frames: list[int],
                logprobs: list[float], frame_seconds: float) -> list[Word]:
    """Pieces grouped into words (a '▁' piece opens one): `text` spells a group, a word starts at
    its first token's frame and ends one frame after its last token's, its confidence is the mean
    token probability."""
    groups: list[list[int]] = []
    for i, tok in enumerate(tokens):
        if not groups or pieces[tok].startswith(WORD_START):
            groups.append([i])
        else:
            groups[-1].append(i)
    words = []
    for group in groups:
        spelled = text([tokens[i] for i in group]).strip()
        if not spelled:
            continue
        words.append(Word(
            word=spelled,
            start=round(frames[group[0]] * frame_seconds, 3),
            end=round((frames[group[-1]] + 1) * frame_seconds, 3),
            confidence=sum(math.exp(logprobs[i]) for i in group) / len(group),
        ))  # fmt: skip
    return words


__all__ = ["WORD_START", "piece_words"]
