"""Token ids -> text and words, by the checkpoint's tokenizer: FunASR's character/word-piece rules
(text.py), or a SentencePiece model (`tokenizer_conf.bpemodel`), whose pieces FunASR joins with
SentencePiece's own decoding and this runtime groups into words at each '▁'."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.models.paraformer.text import Words, postprocess
from engine.pieces import WORD_START

CONTINUATION = "@@"
"""FunASR's mark on a word piece that continues into the next one."""


@dataclass(frozen=True)
class Spelling:
    vocab: list[str]
    sentencepiece: Any | None = None
    """A loaded `sentencepiece.SentencePieceProcessor`, or None for FunASR's character rules."""

    @classmethod
    def of(cls, ckpt: Any) -> Spelling:
        """The spelling of a loaded `ParaformerCheckpoint`."""
        return cls(ckpt.tokens, ckpt.sentencepiece)

    @property
    def kind(self) -> str:
        return "sentencepiece" if self.sentencepiece is not None else "char"

    def token_bytes(self, tokens: list[int]) -> list[bytes]:
        """Each token's vocabulary entry as UTF-8 (what `token_bytes` reports)."""
        return [self.vocab[t].encode("utf-8") for t in tokens]

    def text(self, tokens: list[int]) -> str:
        pieces = [self.vocab[t] for t in tokens]
        if self.sentencepiece is not None:
            return str(self.sentencepiece.decode_pieces(pieces))
        return postprocess(pieces).text

    def words(self, tokens: list[int], spans: list[tuple[int, int]]) -> Words:
        """Text and words with their spans (ms), from one span per token."""
        pieces = [self.vocab[t] for t in tokens]
        if self.sentencepiece is None:
            return postprocess(pieces, spans)
        groups: list[list[int]] = []
        for i, piece in enumerate(pieces):
            if not groups or piece.startswith(WORD_START):
                groups.append([i])
            else:
                groups[-1].append(i)
        kept = [(str(self.sentencepiece.decode_pieces([pieces[i] for i in g])).strip(), g) for g in groups]
        kept = [(w, g) for w, g in kept if w]
        return Words(text=self.text(tokens), words=[w for w, _ in kept], groups=[g for _, g in kept],
                     spans=[(spans[g[0]][0], spans[g[-1]][1]) for _, g in kept])  # fmt: skip

    def stable_prefix(self, tokens: list[int]) -> int:
        """How many leading tokens spell text that later tokens cannot change: up to the last
        token that ends a word for sure. (A word piece may continue; single letters may still
        merge into an abbreviation, FunASR's 'u n y' -> 'UNY'; a SentencePiece word ends only
        when the next one starts.)"""
        if self.sentencepiece is not None:
            starts = [i for i, t in enumerate(tokens) if self.vocab[t].startswith(WORD_START)]
            return starts[-1] if starts else 0
        for end in range(len(tokens), 0, -1):
            piece = self.vocab[tokens[end - 1]]
            if not (CONTINUATION in piece or (len(piece) == 1 and piece.isascii() and piece.isalpha())):
                return end
        return 0
