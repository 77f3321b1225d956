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

    max_pad_ratio: float = 1.25
    """A step's pieces, longest first, are split into forwards whose padded frames stay within this
    multiple of their real frames. Batching pays per frame, padding costs per frame: on the 2-core
    VM, 8 dev clips (3.6-11.7 s) in one padded forward ran at 4.8x real time per CPU-second
    against 6.1x for one clip alone (1.77x padding), paraformer-large shape, one thread."""

    languages: tuple[str, ...] = ()
    """ISO 639-1 codes the checkpoint transcribes (e.g. 'zh,en' for paraformer-zh): FunASR's
    config.yaml does not say, so the deployment declares them (ModelInfo.languages); a request may
    then name one of them. Empty: the model declares no language."""

    def __post_init__(self) -> None:
        if not self.max_segment_seconds >= 1.0:
            raise ValueError(f"max_segment_seconds must be >= 1, got {self.max_segment_seconds}")
        if not self.max_pad_ratio >= 1.0:
            raise ValueError(f"max_pad_ratio must be >= 1, got {self.max_pad_ratio}")
        if any(not (len(code) == 2 and code.isalpha() and code.islower()) for code in self.languages):
            raise ValueError(f"languages must be ISO 639-1 codes like 'zh', got {self.languages}")
