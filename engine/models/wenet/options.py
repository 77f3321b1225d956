"""WeNet family options (`EngineConfig.family_options["wenet"]`, server settings `OASR_WENET_*`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WenetOptions:
    ctc_weight: float = 0.5
    """Attention rescoring: weight of the CTC score beside the attention decoder's when the final
    n-best of a beam-search request is reordered (WeNet runtime's default)."""

    keyword_boost: float = 3.0
    """Bonus (log-probability) per matched token of a request's keywords in the CTC beam search
    (contextual biasing; engine/ops/context_biasing.py)."""

    max_stream_blocks: int | None = None
    """Per-stream ceiling of KV blocks (a stream reaching it is recycled or finished, see below);
    None allows a stream the whole pool."""

    recycle_streaming_history: bool = False
    """At a stream's KV ceiling: True drops the stream's oldest block (the stream goes on with
    less left context), False finishes it with finish_reason='length'. Off by default because
    recycling silently changes what the encoder attends to, and so the transcript, while
    'length' tells the client its stream was cut."""

    language: str = ""
    """ISO 639-1 code of the language the checkpoint transcribes, declared in /v1/models so requests
    naming it are served; '' reads it from units.txt (English when it spells only with a-z)."""

    def __post_init__(self) -> None:
        if not self.ctc_weight >= 0:
            raise ValueError(f"ctc_weight must be >= 0, got {self.ctc_weight}")
        if not self.keyword_boost >= 0:
            raise ValueError(f"keyword_boost must be >= 0, got {self.keyword_boost}")
