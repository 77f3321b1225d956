"""Whisper's token space: text pieces from `tokenizer.json`, special tokens, timestamps."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from tokenizers import Tokenizer

from engine.byte_bpe import piece_bytes
from engine.errors import CheckpointError

LANGUAGES = ["en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue"]


class WhisperTokenizer:
    def __init__(self, path: str, n_vocab: int, languages: Sequence[str], multilingual: bool):
        """`languages`: what the checkpoint transcribes (`WhisperSize.languages`)."""
        self.tokenizer = Tokenizer.from_file(path)
        self.multilingual = multilingual
        self.n_vocab = n_vocab

        def tid(tok: str) -> int:
            i = self.tokenizer.token_to_id(tok)
            if i is None:
                raise CheckpointError(f"tokenizer.json lacks the special token {tok!r}")
            return int(i)

        self.eot = tid("<|endoftext|>")
        self.sot = tid("<|startoftranscript|>")
        self.translate = tid("<|translate|>")
        self.transcribe = tid("<|transcribe|>")
        self.sot_lm = tid("<|startoflm|>")
        self.sot_prev = tid("<|startofprev|>")
        self.no_timestamps = tid("<|notimestamps|>")
        nospeech = self.tokenizer.token_to_id("<|nospeech|>")
        self.no_speech = int(nospeech) if nospeech is not None else tid("<|nocaptions|>")
        self.timestamp_begin = self.no_timestamps + 1
        self.languages = tuple(languages)
        self.language_tokens = {lang: tid(f"<|{lang}|>") for lang in self.languages} if multilingual else {}

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode([t for t in tokens if t < self.eot]))

    def decode_token(self, token: int) -> str:
        return str(self.tokenizer.decode([token])) if token < self.eot else ""

    def keyword_tokens(self, keywords: tuple[str, ...]) -> list[int]:
        """A request's keywords as the head of every window's prompt: Whisper copies the spelling
        of words it was prompted with (the biasing OpenAI documents for whisper-1's prompt). They
        are kept whole ahead of the previous text, which is what gets cut when the prompt is full."""
        return self.encode(" " + ", ".join(k.strip() for k in keywords) + ".") if keywords else []

    def token_bytes(self, token: int) -> bytes:
        """The exact bytes of a text token (a byte-level BPE piece may hold part of a character,
        which `decode_token` would show as U+FFFD)."""
        if token >= self.eot:
            return b""
        return piece_bytes(self.tokenizer.id_to_token(token) or "")

    def sot_sequence(self, language: str | None, task: str, timestamps: bool) -> list[int]:
        seq = [self.sot]
        if self.multilingual:
            seq.append(self.language_tokens[language or "en"])
            seq.append(self.translate if task == "translate" else self.transcribe)
        if not timestamps:
            seq.append(self.no_timestamps)
        return seq

    @functools.cached_property
    def space_tokens(self) -> list[int]:
        return self.encode(" ")

    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Group text tokens into words: a token that starts with a space opens a new word;
        anything else (word pieces, punctuation) extends the current one."""
        words: list[str] = []
        word_tokens: list[list[int]] = []
        for t in tokens:
            piece = self.decode_token(t)
            if piece.startswith(" ") or not words:
                words.append(piece)
                word_tokens.append([t])
            else:
                words[-1] += piece
                word_tokens[-1].append(t)
        return words, word_tokens

