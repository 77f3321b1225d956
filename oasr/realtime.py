"""A /v1/realtime client that survives a dropped connection (the resume protocol of
docs/streaming.md#resumable-sessions), used by `oasr.client` and `oasr stream`.

Everything the client sends that the server must not lose (audio, commits) is kept in order.
When the connection drops (any close but a normal one), the client reconnects with the resume
token from `session.created` and the id of the last event it received; the server answers
`session.resumed` with how much audio (`audio_end_ms`) and how many commits it holds, then
replays every event the client missed, exactly once. The client re-sends what follows: audio
from `audio_end_ms`, and the commits after the first `commits_received`.

    client = ResumingRealtimeClient(url, headers)
    await client.connect()
    await client.send_event({"type": "session.update", ...})
    await client.send_audio(pcm16)          # any number of times, then
    await client.commit()
    async for event in client.events(): ...  # each server event once, across reconnects
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

logger = logging.getLogger(__name__)

_END: Any = object()

RECONNECT_ATTEMPTS = 5
RECONNECT_BACKOFF_S = 0.5
"""Wait before the second attempt, doubled after each failed one (well inside the server's grace)."""


class ResumeRefused(Exception):
    """The server would not resume the session (close code and reason in the message)."""


@dataclass
class _Op:
    """An audio chunk (bytes) or a commit (None), with the audio sent before it, in samples."""

    audio: bytes | None
    samples_before: int


class ResumingRealtimeClient:
    def __init__(self, url: str, headers: dict[str, str] | None = None, *, bytes_per_sample: int = 2,
                 rate: int = 24000) -> None:
        self.url = url
        self.headers = headers or {}
        self.bytes_per_sample = bytes_per_sample
        self.rate = rate
        self.ws: Any = None
        self.resume: dict[str, Any] | None = None
        """The session's resume token and grace, from `session.created`."""
        self.last_event_id: str | None = None
        self.reconnects = 0
        self._ops: list[_Op] = []
        self._samples = 0
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._send_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._closing = False

    # ------------------------------------------------------------------ sending

    async def connect(self) -> None:
        import websockets

        self.ws = await websockets.connect(self.url, additional_headers=self.headers, max_size=None)
        self._reader = asyncio.ensure_future(self._read())

    async def send_event(self, event: dict[str, Any]) -> None:
        """A configuration event (session.update): sent now, not re-sent after a reconnect."""
        async with self._send_lock:
            await self._send(json.dumps(event))

    async def send_audio(self, pcm: bytes) -> None:
        async with self._send_lock:
            self._ops.append(_Op(pcm, self._samples))
            self._samples += len(pcm) // self.bytes_per_sample
            await self._send(pcm)

    async def commit(self) -> None:
        async with self._send_lock:
            self._ops.append(_Op(None, self._samples))
            await self._send(json.dumps({"type": "input_audio_buffer.commit"}))

    async def close(self) -> None:
        self._closing = True
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()

    def fail(self, exc: BaseException) -> None:
        """End `events()` with `exc`, raised to its consumer (the audio source failed)."""
        self._queue.put_nowait(exc)

    def drop(self) -> None:
        """Cut the connection without a close handshake (what a network failure does)."""
        self.ws.transport.abort()

    async def _send(self, message: str | bytes) -> None:
        import websockets

        try:
            await self.ws.send(message)
        except websockets.ConnectionClosed:  # kept in the log: re-sent once the session is resumed
            logger.debug("send on a dropped connection; it is re-sent after the reconnect")

    # ------------------------------------------------------------------ receiving

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Every server event once, in order, across reconnects (`session.resumed` included);
        ends when the server closes the session normally."""
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def _read(self) -> None:
        import websockets

        try:
            while True:
                try:
                    async for message in self.ws:  # ends on a normal close (1000, 1001)
                        self._deliver(json.loads(message))
                    self._queue.put_nowait(_END)
                    return
                except websockets.ConnectionClosed:
                    if self._closing or self.resume is None:
                        raise
                await self._reconnect()
        except BaseException as exc:  # handed to the consumer of events()
            self._queue.put_nowait(exc)

    def _deliver(self, event: dict[str, Any]) -> None:
        if event.get("type") in ("session.created", "transcription_session.created", "session.resumed"):
            self.resume = event.get("resume") or self.resume
        self.last_event_id = str(event.get("event_id"))
        self._queue.put_nowait(event)

    async def _reconnect(self) -> None:
        import websockets

        assert self.resume is not None and self.last_event_id is not None
        query = urlencode({"resume_token": self.resume["token"], "last_event_id": self.last_event_id})
        url = f"{self.url}{'&' if '?' in self.url else '?'}{query}"
        delay = RECONNECT_BACKOFF_S
        for attempt in range(RECONNECT_ATTEMPTS):
            async with self._send_lock:
                try:
                    ws = await websockets.connect(url, additional_headers=self.headers, max_size=None)
                    greeting = json.loads(await ws.recv())
                except websockets.ConnectionClosed as exc:
                    code = exc.rcvd.code if exc.rcvd else None
                    raise ResumeRefused(f"the server refused to resume the session ({code}: "
                                        f"{exc.rcvd.reason if exc.rcvd else 'no reason'})") from exc
                except (OSError, asyncio.TimeoutError, websockets.InvalidHandshake) as exc:
                    logger.info("reconnect attempt %d failed: %s", attempt + 1, exc)
                    ws = None
                if ws is not None:
                    self.ws = ws
                    self.reconnects += 1
                    self._deliver(greeting)
                    for _ in range(int(greeting.get("replayed", 0))):
                        self._deliver(json.loads(await ws.recv()))
                    await self._resend(int(greeting["audio_end_ms"]), int(greeting.get("commits_received", 0)))
                    logger.info("resumed the session at %d ms of audio", greeting["audio_end_ms"])
                    return
            await asyncio.sleep(delay)
            delay *= 2
        raise ResumeRefused(f"could not reconnect after {RECONNECT_ATTEMPTS} attempts")

    async def _resend(self, audio_end_ms: int, commits: int) -> None:
        """Re-send what the server does not hold: audio from `audio_end_ms`, commits after the
        first `commits` (it skips the fraction of a millisecond it already has)."""
        held = math.floor(audio_end_ms * self.rate / 1000)
        for op in self._ops:
            if op.audio is None:
                if commits > 0:
                    commits -= 1
                else:
                    await self._send(json.dumps({"type": "input_audio_buffer.commit"}))
                continue
            end = op.samples_before + len(op.audio) // self.bytes_per_sample
            if end <= held:
                continue
            skip = max(0, held - op.samples_before) * self.bytes_per_sample
            await self._send(op.audio[skip:])
