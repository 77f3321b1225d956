"""The one writer of a realtime WebSocket: turn pumps and the receive loop share it."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.websockets import WebSocket, WebSocketState

logger = logging.getLogger(__name__)


class EventSender:
    """Serializes sends on one WebSocket (turn pumps and the receive loop share it) and turns a
    gone client into a quiet no-op: its handler notices the disconnect on receive."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self.closed = False
        self._lock = asyncio.Lock()

    async def send(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        async with self._lock:
            if self.closed or self.websocket.application_state != WebSocketState.CONNECTED:
                return
            try:
                await self.websocket.send_text(json.dumps(event))
            except Exception as exc:  # the peer vanished mid-send (disconnect, reset)
                logger.debug("send failed, client gone: %s", exc)
                self.closed = True

    async def close(self, code: int, reason: str) -> None:
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                await self.websocket.close(code, reason)
            except Exception as exc:
                logger.debug("close failed, client gone: %s", exc)
