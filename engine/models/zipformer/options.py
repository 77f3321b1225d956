"""The zipformer family's engine options (the streaming chunk is chosen by EngineConfig's
chunk_size / num_left_chunks: see geometry.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ZipformerOptions:
    max_streams: int = 256
    """Live streams at once: rows of the per-stream state slots (see streaming.py)."""
    language: str = ""
    """ISO 639-1 code of the language the checkpoint transcribes, declared in /v1/models so requests
    naming it are served (icefall checkpoints do not record it; '' declares none)."""
    full_context_seconds: float = 60.0
    """Offline requests up to this long (s) are encoded with full attention in one forward; its
    attention weights grow with the square of the length. Longer ones run through the chunked streaming path on a streaming model
    (icefall's streaming decode of the whole file) and are refused by a non-streaming one."""
    keyword_boost: float = 2.0
    """Bonus (log-probability) per matched token of a request's keywords in the beam search
    (icefall's ContextGraph; 2.0 is icefall's default context score)."""
