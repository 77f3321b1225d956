"""Keywords -> SeACo hotword token lists, spelled as FunASR spells a hotword file's lines: the
line's words, each through `seg_dict` when the checkpoint has one (lower-cased; a word of CJK
characters or digits not in it goes character by character; anything else is `<unk>`), then
token ids (`<unk>` for a token the list lacks). FunASR appends `[<s>]`, the 'no hotword' entry."""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.errors import UnsupportedError
from engine.models.paraformer.seaco import HOTWORD_FILTER

UNK = "<unk>"
_CJK_OR_DIGITS = re.compile(r"^[\u4E00-\u9FA50-9]+$")


@dataclass(frozen=True)
class HotwordSpeller:
    token_ids: dict[str, int]
    seg_dict: dict[str, list[str]] | None
    sos: int

    def tokens(self, keyword: str) -> list[str]:
        words = keyword.strip().split()
        if self.seg_dict is None:
            return words
        out: list[str] = []
        for word in words:
            word = word.lower()
            if word in self.seg_dict:
                out += self.seg_dict[word]
            elif _CJK_OR_DIGITS.match(word):
                out += [p for ch in word for p in self.seg_dict.get(ch, [UNK])]
            else:
                out.append(UNK)
        return out

    def hotwords(self, keywords: tuple[str, ...]) -> list[list[int]]:
        """The hotword list of a request ([] for no keywords)."""
        if not keywords:
            return []
        if len(keywords) >= HOTWORD_FILTER:
            raise UnsupportedError(f"at most {HOTWORD_FILTER - 1} keywords per request on this model "
                                   "(FunASR's filter for longer hotword lists is not implemented)")  # fmt: skip
        unk = self.token_ids.get(UNK, 0)
        lists = [[self.token_ids.get(t, unk) for t in self.tokens(k)] for k in keywords]
        if any(not ids for ids in lists):
            raise UnsupportedError("a keyword has no tokens")
        return [*lists, [self.sos]]
