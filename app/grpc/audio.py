"""Audio of a StreamingRecognize call: headerless chunks converted as they arrive, or a container
buffered whole, both bounded by the server's limits."""

from __future__ import annotations

import grpc
import numpy as np

from app.audio import AudioDecoder, HeaderlessStream
from app.google.convert import AudioSpec
from app.grpc.convert import RpcError
from app.settings import Settings


def too_long(seconds: float, settings: Settings) -> RpcError:
    return RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"the stream carries more than {settings.max_audio_seconds:g} s of audio "
                    "(--max-audio-seconds); split it into shorter streams")


class PcmChunker:
    """Headerless chunks of any size -> float32 mono at the model rate, in order, bounded by
    --max-audio-seconds (a `HeaderlessStream` that counts)."""

    def __init__(self, spec: AudioSpec, target_rate: int, settings: Settings):
        if not spec.encoding.headerless or not spec.sample_rate:
            raise ValueError(f"PcmChunker needs a headerless encoding with a rate, got {spec}")
        self.spec = spec
        self.stream = HeaderlessStream(spec.encoding, spec.sample_rate, spec.channels, target_rate)
        self.target_rate = target_rate
        self.max_samples = int(settings.max_audio_seconds * target_rate)
        self.settings = settings
        self.samples_out = 0

    def push(self, data: bytes) -> np.ndarray:
        return self._count(self.stream.push(data))

    def flush(self) -> np.ndarray:
        return self._count(self.stream.flush())

    def _count(self, samples: np.ndarray) -> np.ndarray:
        self.samples_out += len(samples)
        if self.samples_out > self.max_samples:
            raise too_long(self.samples_out / self.target_rate, self.settings)
        return samples


class BufferedAudio:
    """Everything a stream sends, for one offline request at half-close."""

    def __init__(self, spec: AudioSpec, target_rate: int, settings: Settings):
        self.spec = spec
        self.settings = settings
        self._pcm = PcmChunker(spec, target_rate, settings) if spec.encoding.headerless else None
        self._parts: list[np.ndarray] = []
        self._bytes: list[bytes] = []
        self.received = 0
        """Bytes of audio received so far."""

    def add(self, data: bytes) -> None:
        self.received += len(data)
        if self._pcm is not None:
            self._parts.append(self._pcm.push(data))
            return
        if self.received > self.settings.max_body_bytes:
            raise RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"the stream's file is larger than {self.settings.max_audio_mib:g} MiB (--max-audio-mib)")
        self._bytes.append(data)

    async def finish(self, decoder: AudioDecoder) -> np.ndarray:
        if self._pcm is not None:
            self._parts.append(self._pcm.flush())
            return np.concatenate(self._parts).astype(np.float32, copy=False)
        decoded = await decoder.decode(b"".join(self._bytes), encoding=self.spec.encoding,
                                       sample_rate=self.spec.sample_rate, channels=self.spec.channels,
                                       max_seconds=self.settings.max_audio_seconds)
        return decoded.samples
