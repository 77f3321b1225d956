"""The checkpoint's SentencePiece model: ids -> text, words with times from token frames."""

from __future__ import annotations

import sentencepiece as spm

from engine.errors import CheckpointError
from engine.pieces import WORD_START, piece_words
from engine.types import Word

"""SentencePiece's word-start marker."""


class Tokenizer:
    def __init__(self, model_proto: bytes, vocab_size: int) -> None:
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.LoadFromSerializedProto(model_proto)
        except Exception as exc:  # sentencepiece raises RuntimeError/OSError for a bad proto
            raise CheckpointError(f"the tokenizer model in the checkpoint cannot be read: {exc}") from exc
        if self.sp.get_piece_size() != vocab_size:
            raise CheckpointError(
                f"tokenizer has {self.sp.get_piece_size()} pieces, the model's vocabulary {vocab_size}"
            )
        self.pieces = [self.sp.id_to_piece(i) for i in range(vocab_size)]

    def encode(self, text: str) -> list[int]:
        """Piece ids of `text` (a keyword to bias toward)."""
        return [int(t) for t in self.sp.encode_as_ids(text)]

    def token_bytes(self, tokens: list[int]) -> list[bytes]:
        """Each piece's UTF-8 bytes, '▁' as a space; a byte-fallback piece (`<0xE2>`) is its byte."""
        out = []
        for tok in tokens:
            piece = self.pieces[tok]
            if self.sp.is_byte(tok):
                out.append(bytes([int(piece[3:5], 16)]))
            else:
                out.append(piece.replace(WORD_START, " ").encode())
        return out

    def text(self, tokens: list[int]) -> str:
        return str(self.sp.decode_ids(tokens)) if tokens else ""

    def words(self, tokens: list[int], frames: list[int], logprobs: list[float], frame_seconds: float) -> list[Word]:
        return piece_words(self.pieces, self.text, tokens, frames, logprobs, frame_seconds)
