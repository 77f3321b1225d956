"""The Qwen tokenizer from the checkpoint's `tokenizer.json` (byte-level BPE, ChatML specials)."""

from __future__ import annotations

from tokenizers import Tokenizer

from engine.byte_bpe import piece_bytes
from engine.errors import CheckpointError


class QwenTokenizer:
    def __init__(self, path: str) -> None:
        try:
            self.tokenizer = Tokenizer.from_file(path)
        except Exception as exc:  # tokenizers raises its own Exception subclass
            raise CheckpointError(f"cannot read the tokenizer {path!r}: {exc}") from exc
        self.special = {int(i) for i, t in self.tokenizer.get_added_tokens_decoder().items() if t.special}

    def token_id(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise CheckpointError(f"tokenizer.json lacks the token {token!r}")
        return int(found)

    def encode(self, text: str) -> list[int]:
        """Text with special tokens spelled out (ChatML) -> ids."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode([t for t in tokens if t not in self.special]))

    def token_bytes(self, token: int) -> bytes:
        """The exact bytes of a text token (a piece may hold part of a UTF-8 character)."""
        if token in self.special:
            return b""
        return piece_bytes(self.tokenizer.id_to_token(token) or "")
