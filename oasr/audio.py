"""Audio files as the realtime socket takes them: headerless 16-bit mono PCM at a chosen rate."""

from __future__ import annotations

import os
from collections.abc import Iterator

PCM16_BYTES = 2
"""Bytes per 16-bit sample."""
CHUNK_MS = 20
"""Milliseconds of audio per WebSocket frame when a file is streamed (what a microphone sends)."""


def read_pcm16(path: str | os.PathLike[str], rate: int) -> bytes:
    """Decode any container PyAV (FFmpeg) reads to mono little-endian int16 PCM at `rate` Hz."""
    import av

    out = bytearray()
    resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
    with av.open(str(path)) as container:
        for frame in container.decode(container.streams.audio[0]):
            for converted in resampler.resample(frame):
                out += converted.to_ndarray().tobytes()
    for converted in resampler.resample(None):  # the resampler's tail
        out += converted.to_ndarray().tobytes()
    return bytes(out)


def pcm_chunks(pcm: bytes, rate: int, chunk_ms: int = CHUNK_MS) -> Iterator[bytes]:
    """`pcm` cut into `chunk_ms` frames (the last may be shorter)."""
    size = rate * chunk_ms // 1000 * PCM16_BYTES
    for offset in range(0, len(pcm), size):
        yield pcm[offset: offset + size]
