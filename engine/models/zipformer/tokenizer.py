"""The checkpoint's vocabulary: a SentencePiece `bpe.model`, or icefall's `tokens.txt` table
("piece id" per line). Ids -> text, and words with times from token frames."""

from __future__ import annotations

from pathlib import Path

from engine.errors import CheckpointError
from engine.pieces import WORD_START, piece_words
from engine.types import Word

"""SentencePiece's word-start marker."""


class Tokenizer:
    def __init__(self, pieces: list[str], sp: object | None = None) -> None:
        self.pieces = pieces
        self.sp = sp

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    @classmethod
    def from_dir(cls, ckpt_dir: str) -> Tokenizer:
        d = Path(ckpt_dir)
        if (d / "bpe.model").is_file():
            import sentencepiece as spm

            sp = spm.SentencePieceProcessor()
            try:
                sp.Load(str(d / "bpe.model"))
            except Exception as exc:  # sentencepiece raises RuntimeError/OSError for a bad model
                raise CheckpointError(f"{d / 'bpe.model'}: cannot be read: {exc}") from exc
            return cls([sp.IdToPiece(i) for i in range(sp.GetPieceSize())], sp)
        path = d / "tokens.txt"
        table: dict[int, str] = {}
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            parts = line.rsplit(maxsplit=1)
            if len(parts) != 2 or not parts[1].isdigit():
                raise CheckpointError(f"{path}:{n}: expected 'piece id', got {line!r}")
            table[int(parts[1])] = parts[0]
        if sorted(table) != list(range(len(table))):
            raise CheckpointError(f"{path}: ids must be 0..{len(table) - 1} without gaps")
        return cls([table[i] for i in range(len(table))])

    def encode(self, text: str) -> list[int]:
        """Piece ids of `text` (needs bpe.model)."""
        if self.sp is None:
            raise CheckpointError("encoding text needs bpe.model (this checkpoint has tokens.txt only)")
        return [int(t) for t in self.sp.EncodeAsIds(text)]  # type: ignore[attr-defined]

    def text(self, tokens: list[int]) -> str:
        if not tokens:
            return ""
        if self.sp is not None:
            return str(self.sp.DecodeIds(tokens))  # type: ignore[attr-defined]
        return "".join(self.pieces[t] for t in tokens).replace(WORD_START, " ").strip()

    def token_bytes(self, tokens: list[int]) -> list[bytes]:
        return [self.pieces[t].replace(WORD_START, " ").encode() for t in tokens]

    def words(self, tokens: list[int], frames: list[int], logprobs: list[float], frame_seconds: float) -> list[Word]:
        return piece_words(self.pieces, self.text, tokens, frames, logprobs, frame_seconds)
