"""WeNet family options (`EngineConfig.family_options["wenet"]`, server settings `OASR_WENET_*`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WenetOptions:
    ctc_weight: float = 0.5
    """Attention rescoring: weight of the CTC score beside the attention decoder's when the final
    n-best of a beam-search request is reordered (WeNet runtime's default)."""

    def __post_init__(self) -> None:
        if not self.ctc_weight >= 0:
            raise ValueError(f"ctc_weight must be >= 0, got {self.ctc_weight}")
