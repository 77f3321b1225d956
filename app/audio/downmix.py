"""Decoded chunks -> float32 mono at the model's rate, as the decoder hands them over.

An upload was decoded whole at its own rate and channels, then downmixed and resampled: an hour
of stereo 44.1 kHz MP3 (within the default 25 MiB and 3600 s) held ~1.3 GB of float32 samples,
twice over while they were joined, for 230 MB kept (`decode_audio` on ten minutes of it: +495
MiB at its peak, now +84 MiB). Downmixing each chunk and resampling it in a stream (the live
streams' `StreamResampler`) keeps only the result: the same samples bit for bit (soxr's stream
and its one-shot `resample` give equal output, and the per-sample downmix does not see the
chunking; tests/app/test_audio_downmix.py).
"""

from __future__ import annotations

import numpy as np

from app.audio.errors import AudioDecodeError
from app.audio.pcm import _to_mono
from app.audio.stream import StreamResampler


class MonoAtRate:
    """Collects decoded chunks ((frames, channels) float32 at one source rate) as mono at
    `target_rate`; with `keep_source`, also the chunks as they came (per-channel recognition)."""

    def __init__(self, target_rate: int, keep_source: bool = False):
        self.target_rate = target_rate
        self.keep_source = keep_source
        self.rate = 0
        """The source rate (0 before the first chunk)."""
        self.channels = 0
        self.frames = 0
        """Source frames taken so far."""
        self._mono: list[np.ndarray] = []
        self._source: list[np.ndarray] = []
        self._resampler: StreamResampler | None = None

    def add(self, chunk: np.ndarray, rate: int) -> None:
        """Take one chunk of decoded audio. Non-finite samples are an error."""
        if not len(chunk):
            return
        if not np.isfinite(chunk).all():
            raise AudioDecodeError(
                "The audio contains NaN or infinite sample values. Send finite samples "
                "(float audio is expected in [-1, 1])."
            )
        if self.rate and rate != self.rate:
            raise AudioDecodeError("The audio changes its sample rate midway; re-encode it at one rate.")
        self.rate, self.channels = rate, chunk.shape[1]
        self.frames += len(chunk)
        if self.keep_source:
            self._source.append(np.array(chunk, dtype=np.float32))
        if self._resampler is None:
            self._resampler = StreamResampler(rate, self.target_rate)
        self._mono.append(self._resampler.process(_to_mono(chunk)))

    def mono(self) -> np.ndarray:
        """Everything taken, as float32 mono at the target rate (the resampler flushed)."""
        if self._resampler is not None:
            self._mono.append(self._resampler.flush())
        out = np.concatenate(self._mono) if self._mono else np.zeros(0, np.float32)
        self._mono = [out]
        return out.astype(np.float32, copy=False)

    def source(self) -> np.ndarray:
        """The chunks as they came, joined: (frames, channels) at the source rate (`keep_source`)."""
        assert self.keep_source, "the source chunks were not kept"
        return np.concatenate(self._source) if self._source else np.zeros((0, 1), np.float32)
