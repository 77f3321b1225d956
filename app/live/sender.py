"""The one writer of a live WebSocket session (realtime and Deepgram): turn pumps and the receive loop share it.

A resumable session outlives its WebSocket. Every event is logged (the last `replay` of them)
before it goes to the connection attached now, if any; a client that reconnects names the last
event it received and `attach` sends it the `session.resumed` greeting, then every later
logged event exactly once, then live ones, all under the one lock that orders sends.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketState

logger = logging.getLogger(__name__)

MAX_REASON_BYTES = 123
"""RFC 6455 5.5: a control frame's payload is at most 125 bytes, two of them the close code."""


def close_reason(text: str) -> str:
    """`text` cut to what a close frame holds (a longer reason makes the close itself fail)."""
    data = text.encode()
    if len(data) <= MAX_REASON_BYTES:
        return text
    return data[: MAX_REASON_BYTES - 3].decode(errors="ignore") + "..."


class EventSender:
    """Serializes sends; a gone client detaches quietly (its handler notices on receive)."""

    def __init__(self, websocket: WebSocket | None, *, replay: int = 0) -> None:
        self.websocket = websocket
        """The connection events go to now (None while a resumable session waits for its client)."""
        self.closed = False
        """The server ended the session: nothing more is sent."""
        self.replay = replay
        """Events kept for a resumed connection (0: not resumable, nothing is logged)."""
        self._lock = asyncio.Lock()
        self._log: deque[tuple[int, str, str]] = deque()  # (position, event_id, JSON text)
        self._positions: dict[str, int] = {}
        """event_id -> position in the session's event sequence (logged events and greetings)."""
        self._next = 0
        self._broken: WebSocket | None = None
        """A connection a send failed on: nothing more is written to it."""

    async def send(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        text = json.dumps(event)
        async with self._lock:
            if self.closed:
                return
            if self.replay:
                self._append(str(event.get("event_id")), text)
            await self._write(text)

    def knows(self, event_id: str) -> bool:
        """The event is still in the log (a connection may resume after it)."""
        return event_id in self._positions

    async def attach(self, websocket: WebSocket, after: str,
                     greeting: Callable[[int], dict[str, Any]]) -> WebSocket | None:
        """Make `websocket` the session's connection: send `greeting(events to replay)`, then
        every logged event after `after` (which must be `knows`n). Returns the connection it
        replaces (the caller closes it)."""
        async with self._lock:
            old, self.websocket = self.websocket, websocket
            last = self._positions[after]
            missed = [text for position, _, text in self._log if position > last]
            hello = greeting(len(missed))
            # the greeting stands for `after`: a client dropped during the replay resumes from it
            self._positions[str(hello["event_id"])] = last
            await self._write(json.dumps(hello))
            for text in missed:
                await self._write(text)
        return old if old is not websocket else None

    def detach(self, websocket: WebSocket) -> bool:
        """The connection `websocket` is gone; False when it no longer was the session's."""
        if self.websocket is not websocket:
            return False
        self.websocket = None
        return True

    async def close(self, code: int, reason: str) -> None:
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            websocket, self.websocket = self.websocket, None
            if websocket is None:
                return
            try:
                await websocket.close(code, close_reason(reason))
            except Exception as exc:
                logger.debug("close failed, client gone: %s", exc)

    def _append(self, event_id: str, text: str) -> None:
        self._log.append((self._next, event_id, text))
        self._positions[event_id] = self._next
        self._next += 1
        while len(self._log) > self.replay:
            _, dropped, _ = self._log.popleft()
            self._positions.pop(dropped, None)
        if len(self._positions) > 2 * self.replay:  # greetings' aliases of events no longer logged
            oldest = self._log[0][0]
            self._positions = {k: v for k, v in self._positions.items() if v >= oldest - 1}

    async def _write(self, text: str) -> None:
        websocket = self.websocket
        if websocket is None or websocket.application_state != WebSocketState.CONNECTED:
            return
        if websocket is self._broken:
            return
        try:
            await websocket.send_text(text)
        except Exception as exc:  # the peer vanished mid-send: its handler sees the disconnect and detaches it
            logger.debug("send failed, client gone: %s", exc)
            self._broken = websocket
