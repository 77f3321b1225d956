"""Live transcription: the commit policy (torch-free) and, alongside it, the streaming runner."""

from __future__ import annotations

from engine.streaming.local_agreement import AgreementUpdate, LocalAgreement, join_words, normalize_word

__all__ = ["AgreementUpdate", "LocalAgreement", "join_words", "normalize_word"]
