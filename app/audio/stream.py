"""`StreamResampler`: chunk-by-chunk resampling of live audio to the model rate."""

from __future__ import annotations

import numpy as np
import soxr

from app.audio.errors import AudioDecodeError
from app.audio.limits import MODEL_SAMPLE_RATE_HZ, RESAMPLE_QUALITY, _check_rate

__all__ = ["StreamResampler"]


class StreamResampler:
    """Incremental resampler for live streams (float32 mono in, float32 mono out).

    Feeding chunks through `process` and ending with `flush` gives the same samples as one
    `soxr.resample` of the whole signal, without buffering the stream. Equal rates pass through.
    """

    def __init__(self, in_rate: int, out_rate: int = MODEL_SAMPLE_RATE_HZ) -> None:
        _check_rate(in_rate, "A stream sample rate")
        _check_rate(out_rate, "A target sample rate")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream = (
            None
            if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=RESAMPLE_QUALITY)
        )
        self._flushed = False

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Resample the next chunk; returns whatever output is ready (possibly empty)."""
        if self._flushed:
            raise RuntimeError("StreamResampler.process called after flush()")
        chunk: np.ndarray = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
        if not np.isfinite(chunk).all():
            raise AudioDecodeError("The audio contains NaN or infinite sample values. Send finite samples.")
        if self._stream is None:
            passthrough: np.ndarray = chunk.copy()  # the caller may reuse its buffer
            return passthrough
        out: np.ndarray = self._stream.resample_chunk(chunk, last=False)
        return out

    def flush(self) -> np.ndarray:
        """End the stream and return the resampler's remaining output."""
        if self._flushed:
            return np.zeros(0, dtype=np.float32)
        self._flushed = True
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        tail: np.ndarray = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        return tail
