"""Live audio, chunk by chunk, to float32 mono at the model rate.

    StreamResampler   float32 mono at any rate -> the model rate, without buffering the stream
    HeaderlessFrames  headerless bytes (LINEAR16, LINEAR32F, MULAW, ALAW) cut anywhere -> whole frames
    HeaderlessStream  the same bytes -> float32 mono at the model rate
    ChannelSplitter   interleaved headerless bytes -> one byte stream per channel

Containers that arrive as a stream (WebM/Ogg Opus from a browser) are `ContainerStream`
(app/audio/container_stream.py).
"""

from __future__ import annotations

import numpy as np
import soxr

from app.audio.encodings import _SAMPLE_WIDTH_BYTES, AudioEncoding, parse_encoding
from app.audio.errors import AudioDecodeError, UnsupportedAudioError
from app.audio.limits import MODEL_SAMPLE_RATE_HZ, RESAMPLE_QUALITY, _check_channels, _check_rate
from app.audio.pcm import headerless_to_mono

__all__ = ["ChannelSplitter", "HeaderlessStream", "StreamResampler"]


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
        self._stream = self._new_stream()
        self._flushed = False

    def _new_stream(self) -> soxr.ResampleStream | None:
        if self.in_rate == self.out_rate:
            return None
        return soxr.ResampleStream(self.in_rate, self.out_rate, 1, dtype="float32", quality=RESAMPLE_QUALITY)

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

    def cut(self) -> np.ndarray:
        """The output still held back for look-ahead, as if the stream ended here; later chunks
        start a fresh filter (a turn boundary: the turn gets all of its audio now)."""
        tail = self.flush()
        self._stream = self._new_stream()
        self._flushed = False
        return tail


class HeaderlessFrames:
    """Headerless bytes (LINEAR16, LINEAR32F, MULAW, ALAW) cut anywhere -> whole frames. Clients
    may cut messages anywhere, so a partial frame is carried to the next chunk."""

    def __init__(self, encoding: AudioEncoding | str, channels: int) -> None:
        self.encoding = parse_encoding(encoding)
        if not self.encoding.headerless:
            raise UnsupportedAudioError(f"{self.encoding.value} is not a headerless encoding")
        _check_channels(channels)
        self.channels = channels
        self.width = _SAMPLE_WIDTH_BYTES[self.encoding]
        self.frame_bytes = self.width * channels
        self._rest = b""

    def take(self, data: bytes) -> bytes:
        """The whole frames received so far (a trailing partial frame waits for the next chunk)."""
        data = self._rest + data if self._rest else data
        whole = len(data) - len(data) % self.frame_bytes
        self._rest = data[whole:]
        return data[:whole]

    def finish(self) -> None:
        """End of the stream: one that ends inside a frame is an error."""
        if self._rest:
            raise AudioDecodeError(
                f"the stream ended inside a frame ({len(self._rest)} stray bytes; frames of {self.encoding.value} "
                f"x {self.channels} channel(s) are {self.frame_bytes} bytes)"
            )


class HeaderlessStream:
    """Headerless live audio (LINEAR16, LINEAR32F, MULAW, ALAW) -> float32 mono at `out_rate`.

    Whole frames only (`HeaderlessFrames`); one resampler per stream keeps the output identical
    to a whole-body decode."""

    def __init__(self, encoding: AudioEncoding | str, sample_rate: int, channels: int = 1,
                 out_rate: int = MODEL_SAMPLE_RATE_HZ) -> None:
        self.frames = HeaderlessFrames(encoding, channels)
        self.encoding = self.frames.encoding
        self.channels = channels
        self.resampler = StreamResampler(sample_rate, out_rate)

    def push(self, data: bytes) -> np.ndarray:
        """The next chunk's samples (a trailing partial frame waits for the next chunk)."""
        whole = self.frames.take(data)
        if not whole:
            return np.zeros(0, dtype=np.float32)
        return self.resampler.process(headerless_to_mono(whole, self.encoding, self.channels))

    def cut(self) -> np.ndarray:
        """Everything received so far that the resampler still holds (see `StreamResampler.cut`)."""
        return self.resampler.cut()

    def flush(self) -> np.ndarray:
        """End of the stream: the resampler's tail. A stream that ends inside a frame is an error."""
        self.frames.finish()
        return self.resampler.flush()


class ChannelSplitter:
    """Interleaved headerless audio -> one byte stream per channel, in the same encoding (for
    per-channel recognition of a live stream), from whole frames (`HeaderlessFrames`)."""

    def __init__(self, encoding: AudioEncoding | str, channels: int) -> None:
        self.frames = HeaderlessFrames(encoding, channels)

    def push(self, data: bytes) -> list[bytes]:
        """Each channel's bytes of the whole frames received so far (empty until a frame is whole)."""
        f = self.frames
        frames = np.frombuffer(f.take(data), dtype=np.uint8).reshape(-1, f.channels, f.width)
        return [frames[:, c, :].tobytes() for c in range(f.channels)]

    def finish(self) -> None:
        """End of the stream: one that ends inside a frame is an error."""
        self.frames.finish()
