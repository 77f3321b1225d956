"""WeNet's CTC output as text: detokenization and word timings from the CTC alignment of a
stream's search (engine/ctc_prefix.py)."""

from __future__ import annotations

import math

from engine.ctc_prefix import CTCState
from engine.ops import Hypothesis
from engine.types import Alternative, Word

SP_SPACE = "▁"
"""SentencePiece word-start marker."""

__all__ = ["Detokenizer"]


class Detokenizer:
    """units.txt ids -> text; SentencePiece pieces ('▁' starts a word) or character units."""

    def __init__(self, units: list[str]) -> None:
        self.units = units
        self.special = {i for i, u in enumerate(units) if u.startswith("<") and u.endswith(">")}

    def pieces(self, tokens: tuple[int, ...] | list[int]) -> list[str]:
        return [self.units[t] for t in tokens if t not in self.special]

    def text(self, tokens: tuple[int, ...] | list[int]) -> str:
        return "".join(self.pieces(tokens)).replace(SP_SPACE, " ").strip()

    def words(self, h: Hypothesis, frame_seconds: float) -> list[Word]:
        """Group pieces into words: a piece starting with '▁', or a CJK character, opens one."""
        groups: list[list[int]] = []
        for i, tok in enumerate(h.tokens):
            if tok in self.special:
                continue
            piece = self.units[tok]
            if (
                not groups
                or piece.startswith(SP_SPACE)
                or _is_cjk(piece)
                or _is_cjk(self.units[h.tokens[groups[-1][-1]]])
            ):
                groups.append([i])
            else:
                groups[-1].append(i)
        words = []
        for g in groups:
            text = "".join(self.units[h.tokens[i]] for i in g).replace(SP_SPACE, "")
            if not text:
                continue
            start = h.frames[g[0]] * frame_seconds
            end = (h.frames[g[-1]] + 1) * frame_seconds
            conf = sum(math.exp(h.token_logprobs[i]) for i in g) / len(g)
            words.append(Word(word=text, start=round(start, 3), end=round(end, 3), confidence=conf))
        return words

    def nbest(self, state: CTCState, n: int) -> list[Alternative]:
        return [
            Alternative(text=self.text(h.tokens), confidence=state.confidence(h)) for h in state.beams[:n]
        ]


def _is_cjk(piece: str) -> bool:
    return len(piece) == 1 and "\u4e00" <= piece <= "\u9fff"
