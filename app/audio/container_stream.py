"""`ContainerStream`: a container file that arrives piece by piece (WebM/Opus from a browser's
MediaRecorder, Ogg/Opus, a WAV or FLAC file streamed as it is read) -> float32 mono at the
model rate, decoded as the bytes arrive.

FFmpeg's demuxers pull their input, so each stream gets one decoder thread that reads from a
buffer the event loop fills: a read with nothing buffered blocks until the next `push` (or
the end). `push` returns once the thread has consumed every byte given so far and is waiting
for more, so a chunk's samples come back with that chunk, as far as the container lets them
(a demuxer hands out a packet only once it has all of it).

    push(bytes) ─► buffer ─► [thread] PyAV demux + decode ─► downmix ─► StreamResampler ─► out
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import av
import numpy as np

from app.audio.decode import FFMPEG_DEMUXERS
from app.audio.errors import AudioDecodeError
from app.audio.limits import MODEL_SAMPLE_RATE_HZ
from app.audio.stream import StreamResampler

__all__ = ["ContainerStream"]

logger = logging.getLogger(__name__)

FFMPEG_FORMAT = {"webm": "matroska", "ogg": "ogg", "wav": "wav", "flac": "flac", "mp3": "mp3"}
"""Sniffed container (app.audio.encodings.sniff_container) -> the FFmpeg demuxer that reads it,
named so FFmpeg needs no probing (probing a live stream would wait for more bytes than it needs)."""


class _Pipe:
    """The decoder thread's input: blocking reads over the bytes the event loop appends."""

    def __init__(self, on_starved: Callable[[int], None]) -> None:
        self._cond = threading.Condition()
        self._buf = bytearray()
        self._ended = False
        self._on_starved = on_starved
        self.consumed = 0

    def write(self, data: bytes) -> None:
        with self._cond:
            self._buf += data
            self._cond.notify()

    def end(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify()

    def read(self, size: int = -1) -> bytes:
        with self._cond:
            while not self._buf and not self._ended:
                self._on_starved(self.consumed)
                self._cond.wait()
            n = len(self._buf) if size < 0 else min(size, len(self._buf))
            data = bytes(self._buf[:n])
            del self._buf[:n]
            self.consumed += n
            return data


class ContainerStream:
    """Live container audio -> float32 mono at `out_rate`. One decoder thread per stream;
    call `close()` when done (also after an error), which ends the thread."""

    def __init__(self, container: str, out_rate: int = MODEL_SAMPLE_RATE_HZ) -> None:
        if container not in FFMPEG_FORMAT:
            raise AudioDecodeError(f"a live stream cannot be a {container} file; send WebM or Ogg (Opus), WAV or FLAC")
        self.container = container
        self.out_rate = out_rate
        self.codec: str | None = None
        """The codec FFmpeg found (e.g. 'opus'), once the header has been read."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pipe = _Pipe(self._starved)
        self._thread: threading.Thread | None = None
        self._fed = 0
        self._lock = threading.Lock()
        self._out: list[np.ndarray] = []
        self._error: AudioDecodeError | None = None
        self._done = False
        self._waiter: tuple[int, asyncio.Future[None]] | None = None
        self._idle_at = -1
        """Bytes consumed when the thread last blocked for more (guarded by `_lock`)."""
        self._resampler: StreamResampler | None = None

    # ------------------------------------------------------------------ event-loop side

    async def push(self, data: bytes) -> np.ndarray:
        """Hand the decoder the next bytes; returns the samples they completed (maybe none)."""
        if not data:
            return np.zeros(0, dtype=np.float32)
        self._start()
        self._fed += len(data)
        self._pipe.write(data)
        await self._settled(self._fed)
        return self._take()

    async def flush(self) -> np.ndarray:
        """End of the stream: decode what is left and return it with the resampler's tail."""
        self._start()
        self._pipe.end()
        await self._settled(None)
        return self._take()

    def cut(self) -> np.ndarray:
        """Samples the resampler holds back, as if the stream ended here (a turn boundary). Bytes
        the demuxer has not turned into a packet yet stay with the next turn."""
        with self._lock:
            if self._resampler is None:
                return np.zeros(0, dtype=np.float32)
            return self._resampler.cut()

    def close(self) -> None:
        """Stop the decoder thread (idempotent; it ends at its next read)."""
        self._pipe.end()

    def _start(self) -> None:
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name=f"container-stream-{self.container}", daemon=True)
            self._thread.start()

    async def _settled(self, fed: int | None) -> None:
        """Until the thread has read `fed` bytes and waits for more (None: until it ended)."""
        assert self._loop is not None
        future: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            if self._done or (fed is not None and self._idle_at == fed):
                return
            self._waiter = (fed if fed is not None else -1, future)
        await future

    def _take(self) -> np.ndarray:
        with self._lock:
            if self._error is not None:
                raise self._error
            out, self._out = self._out, []
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    # ------------------------------------------------------------------ decoder thread

    def _starved(self, consumed: int) -> None:
        with self._lock:
            self._idle_at = consumed
            self._wake(lambda fed: fed == consumed)

    def _finished(self) -> None:
        with self._lock:
            self._done = True
            self._wake(lambda fed: True)

    def _wake(self, ready: Callable[[int], bool]) -> None:
        """Resolve the loop's waiter if `ready(fed)` (called with `_lock` held)."""
        if self._waiter is None or not ready(self._waiter[0]):
            return
        future = self._waiter[1]
        self._waiter = None
        assert self._loop is not None
        self._loop.call_soon_threadsafe(_resolve, future)

    def _run(self) -> None:
        try:
            self._decode()
        except av.FFmpegError as exc:
            logger.debug("live %s stream: FFmpeg failed: %s", self.container, exc)
            with self._lock:
                self._error = AudioDecodeError(
                    f"the {self.container} stream could not be decoded ({exc}); send one continuous, "
                    "well-formed stream (e.g. WebM/Opus from MediaRecorder, or Ogg/Opus)")
        except Exception as exc:  # a decoder bug ends this stream, never the server
            logger.exception("live %s stream: decoder failed", self.container)
            with self._lock:
                self._error = AudioDecodeError(f"the {self.container} stream could not be decoded: {exc}")
        finally:
            self._finished()

    def _decode(self) -> None:
        container = av.open(self._pipe, mode="r", format=FFMPEG_FORMAT[self.container],
                            options={"format_whitelist": FFMPEG_DEMUXERS, "probesize": "2048", "analyzeduration": "0"})
        with container:
            if not container.streams.audio:
                raise AudioDecodeError(f"the {self.container} stream has no audio track")
            stream = container.streams.audio[0]
            self.codec = stream.codec_context.name if stream.codec_context is not None else None
            converter = av.AudioResampler(format="fltp")  # planar float; layout and rate as decoded
            for frame in container.decode(stream):
                for out in converter.resample(frame):
                    self._emit(out.to_ndarray(), out.sample_rate, last=False)
            for out in converter.resample(None):
                self._emit(out.to_ndarray(), out.sample_rate, last=False)
        self._emit(np.zeros((1, 0), dtype=np.float32), 0, last=True)

    def _emit(self, planes: np.ndarray, rate: int, *, last: bool) -> None:
        mono = planes.mean(axis=0, dtype=np.float32) if planes.shape[0] > 1 else planes[0]
        with self._lock:
            if self._resampler is None:
                if last:
                    return
                self._resampler = StreamResampler(rate, self.out_rate)
            elif not last and rate != self._resampler.in_rate:
                raise AudioDecodeError(f"the stream's sample rate changed from {self._resampler.in_rate} to {rate} Hz")
            self._out.append(self._resampler.flush() if last else self._resampler.process(mono))


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # the waiting push may have been cancelled (client gone)
        future.set_result(None)
