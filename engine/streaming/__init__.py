"""Live transcription: the commit policy (torch-free), and the chunked-stream runner skeleton
(chunked.py) with the partial and final outputs its families report (outputs.py)."""

from __future__ import annotations

from engine.streaming.local_agreement import AgreementUpdate, LocalAgreement, join_words, normalize_word

__all__ = ["AgreementUpdate", "LocalAgreement", "join_words", "normalize_word"]
