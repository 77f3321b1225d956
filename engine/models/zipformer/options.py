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
    keyword_boost: float = 2.0
    """Bonus (log-probability) per matched token of a request's keywords in the beam search
    (icefall's ContextGraph; 2.0 is icefall's default context score)."""
