"""Per-request keywords for WeNet models: spelled with the checkpoint's units, as a keyword trie.

SentencePiece units ('▁' opens a word): each word becomes '▁' + word, split greedily into the
longest units the model has (the model's own segmentation is usually the longest-match one;
a different split still earns the boost, token by token). Character units (CJK models): one
unit per character, spaces ignored. Letters follow the case the units use (LibriSpeech
models spell in capitals).
"""

from __future__ import annotations

from engine.errors import InvalidRequestError
from engine.ops import ContextTrie

SP_SPACE = "▁"


class KeywordSpeller:
    def __init__(self, units: list[str]) -> None:
        self.ids = {u: i for i, u in enumerate(units) if not (u.startswith("<") and u.endswith(">"))}
        self.sentencepiece = any(u.startswith(SP_SPACE) for u in self.ids)
        letters = "".join(c for u in self.ids for c in u if c.isalpha())
        self.case = "upper" if letters and letters == letters.upper() else "lower" if letters == letters.lower() else ""
        self.longest = max((len(u) for u in self.ids), default=0)

    def spell(self, keyword: str) -> list[int]:
        """Unit ids of `keyword`; InvalidRequestError when the units cannot spell it."""
        text = keyword.upper() if self.case == "upper" else keyword.lower() if self.case == "lower" else keyword
        words = text.split()
        if not self.sentencepiece:
            words = ["".join(words)]
        tokens: list[int] = []
        for word in words:
            rest = SP_SPACE + word if self.sentencepiece else word
            while rest:
                for size in range(min(self.longest, len(rest)), 0, -1):
                    unit = self.ids.get(rest[:size])
                    if unit is not None:
                        tokens.append(unit)
                        rest = rest[size:]
                        break
                else:
                    raise InvalidRequestError(
                        f"keyword {keyword!r} cannot be spelled with this model's units (no unit for {rest[0]!r})"
                    )
        return tokens

    def trie(self, keywords: tuple[str, ...], boost: float) -> ContextTrie | None:
        if not keywords:
            return None
        return ContextTrie.from_keywords([self.spell(k) for k in keywords], boost=boost)
