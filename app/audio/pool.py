"""`AudioDecoder`: `decode_audio` on a bounded thread pool, for async callers."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

# The package, not `app.audio.decode`: `decode_audio` is looked up on it at call time so
# that `app.audio.decode_audio` stays the one name to wrap (the pool-bound test gates it).
from app import audio as _audio
from app.audio.decode import DecodedAudio
from app.audio.encodings import AudioEncoding
from app.audio.limits import MODEL_SAMPLE_RATE_HZ

__all__ = ["DEFAULT_MAX_CONCURRENT_DECODES", "AudioDecoder"]

DEFAULT_MAX_CONCURRENT_DECODES = 2
"""Decodes run at once by `AudioDecoder`; decoding is CPU-bound, so about one per spare core."""


class AudioDecoder:
    """Runs `decode_audio` on a bounded thread pool so the event loop never decodes.

    At most `max_concurrent_decodes` decodes run at once; further ones queue in the pool.
    FFmpeg, libsndfile and soxr release the GIL while they work, so threads scale with cores.
    """

    def __init__(
        self,
        max_concurrent_decodes: int = DEFAULT_MAX_CONCURRENT_DECODES,
        *,
        target_rate: int = MODEL_SAMPLE_RATE_HZ,
    ) -> None:
        if max_concurrent_decodes < 1:
            raise ValueError(f"max_concurrent_decodes must be at least 1, got {max_concurrent_decodes}")
        self.max_concurrent_decodes = max_concurrent_decodes
        self.target_rate = target_rate
        self._pool = ThreadPoolExecutor(max_workers=max_concurrent_decodes, thread_name_prefix="oasr-audio")
        self._closed = False

    async def decode(
        self,
        data: bytes | bytearray | memoryview,
        *,
        encoding: AudioEncoding | str | None = AudioEncoding.AUTO,
        sample_rate: int | None = None,
        channels: int = 1,
        max_seconds: float | None = None,
        keep_channels: bool = False,
    ) -> DecodedAudio:
        """Decode on the pool; same arguments and errors as `decode_audio`."""
        if self._closed:
            raise RuntimeError("AudioDecoder is closed")
        call = functools.partial(
            _audio.decode_audio,
            data,
            encoding=encoding,
            sample_rate=sample_rate,
            channels=channels,
            target_rate=self.target_rate,
            max_seconds=max_seconds,
            keep_channels=keep_channels,
        )
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        """Stop taking work; queued decodes are cancelled, running ones finish in the background."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> AudioDecoder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
