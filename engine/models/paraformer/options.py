"""Paraformer family options (`EngineConfig.family_options["paraformer"]`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParaformerOptions:
    max_segment_seconds: float = 60.0
    """Longest piece (s) of an offline file the encoder attends over at once; longer files are cut
    into pieces this long, recognised as rows of one batch, and their tokens joined. Attention
    memory grows with the square of the piece (60 s = 1,000 encoder frames); FunASR's pipeline
    cuts files with a VAD to about this length too."""

    def __post_init__(self) -> None:
        if not self.max_segment_seconds >= 1.0:
            raise ValueError(f"max_segment_seconds must be >= 1, got {self.max_segment_seconds}")
