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
    multiple of their real frames: batching pays per frame and padding costs per frame
    (measurements: docs/benchmarking.md, Paraformer)."""

    max_forward_seconds: float = 480.0
    """Most audio (s) one encoder forward holds, padding included (rows x the longest row): an
    hour-long file's sixty 60 s pieces run in forwards of eight, so its memory is that of eight
    pieces however long it is (about 66 MiB a minute of rows on the tiny test model). Short
    requests never reach it: max_batch_size rows of 7 s are 450 s."""

    languages: tuple[str, ...] = ()
    """ISO 639-1 codes the checkpoint transcribes (e.g. 'zh,en' for paraformer-zh): FunASR's
    config.yaml does not say, so the deployment declares them (ModelInfo.languages); a request may
    then name one of them. Empty: the model declares no language."""

    chunk_size: tuple[int, int, int] = (0, 10, 5)
    """paraformer-online only: FunASR's streaming `chunk_size` in encoder frames (60 ms each):
    left context kept from the previous window, the chunk, and the look-ahead. (0, 10, 5): 600 ms
    chunks seen with 300 ms of look-ahead, a stream's text trails its audio by 300 ms plus a
    chunk; (0, 8, 4): 480 ms chunks."""

    encoder_chunk_look_back: int = 4
    """paraformer-online only: chunks of past encoder keys and values each layer's self-attention
    also reads (FunASR's `encoder_chunk_look_back`; 4 in its documented setup, 0 for none)."""

    decoder_chunk_look_back: int = 1
    """paraformer-online only: chunks of past encoder output the decoder's cross-attention also
    reads (FunASR's `decoder_chunk_look_back`; 1 in its documented setup, 0 for none)."""

    max_streams: int = 256
    """paraformer-online only: live streams held at once (each keeps its encoder and decoder
    caches, a few hundred KB for paraformer-online's sizes); more wait for admission."""

    def __post_init__(self) -> None:
        if not self.max_segment_seconds >= 1.0:
            raise ValueError(f"max_segment_seconds must be >= 1, got {self.max_segment_seconds}")
        if not self.max_forward_seconds >= self.max_segment_seconds:
            raise ValueError(f"max_forward_seconds ({self.max_forward_seconds}) must hold one piece of "
                             f"max_segment_seconds ({self.max_segment_seconds})")
        if not self.max_pad_ratio >= 1.0:
            raise ValueError(f"max_pad_ratio must be >= 1, got {self.max_pad_ratio}")
        if any(not (len(code) == 2 and code.isalpha() and code.islower()) for code in self.languages):
            raise ValueError(f"languages must be ISO 639-1 codes like 'zh', got {self.languages}")
        left, chunk, ahead = self.chunk_size
        if left < 0 or chunk < 1 or ahead < 1:
            raise ValueError(f"chunk_size must be (left >= 0, chunk >= 1, look-ahead >= 1), got {self.chunk_size}")
        if self.encoder_chunk_look_back < 0 or self.decoder_chunk_look_back < 0:
            raise ValueError("encoder_chunk_look_back and decoder_chunk_look_back must be >= 0 (FunASR's -1, "
                             "an unbounded look-back, is not served)")
        if self.max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {self.max_streams}")
