"""The base of both window owners (window.py's `WindowOwner`): an offline transcription
(offline.py) and a live stream (streaming.py) each decode a request window by window, with the
same request-level facts (its options, language and keywords) and the same decoder prompt layout;
they differ in the prompt text they carry from window to window and in forced tokens."""

from __future__ import annotations

from abc import ABC, abstractmethod

from engine.models.whisper.parts import WhisperParts
from engine.request import Request


class WindowedTranscription(ABC):
    """One request decoded window by window: what every window's decoder prefix is made of."""

    def __init__(self, request: Request, parts: WhisperParts) -> None:
        self.request = request
        self.parts = parts
        self.options = request.decoding
        # an English-only model is always told 'en'; a multilingual one detects the language
        # from the first window unless the request names it
        self.language: str | None = (self.options.language or None) if parts.multilingual else "en"
        self.keywords = parts.tokenizer.keyword_tokens(self.options.keywords)

    def needs_language(self) -> bool:
        return self.language is None

    def set_language(self, code: str) -> None:
        self.language = code

    @abstractmethod
    def prompt_tokens(self) -> list[int]:
        """Text tokens the next window is conditioned on (before start-of-transcript); empty: none."""

    def forced_tokens(self) -> list[int]:
        """Text tokens ending the next window's prefix, decoded as if sampled and without
        timestamps (a live stream's final pass forces what earlier passes heard); empty: none."""
        return []

    def build_prefix(self) -> tuple[list[int], int]:
        """The decoder prompt of the next window and the index of its start-of-transcript token:
        [previous-text marker, prompt...] start-of-transcript sequence [forced...]."""
        tok = self.parts.tokenizer
        prompt, forced = self.prompt_tokens(), self.forced_tokens()
        sot = tok.sot_sequence(self.language, self.options.task, timestamps=not forced)
        prefix = ([tok.sot_prev, *prompt] if prompt else []) + sot
        return prefix + forced, len(prefix) - len(sot)
