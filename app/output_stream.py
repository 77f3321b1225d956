"""One request's outputs on the event loop, as the engine thread's bridge (app/engine_service.py)
hands them over: a bounded queue a surface awaits."""

from __future__ import annotations

import asyncio
import collections
import time

from app.engine_metrics import EngineSeries
from engine import RequestOutput


class OutputStream:
    """One request's outputs on the event loop. When the consumer lags, a newer partial
    replaces the older queued one (partials are cumulative), so memory stays bounded: counted as
    a dropped event. The terminal output is never folded: queued behind the others it is a
    deferred event."""

    def __init__(self, request_id: str, series: EngineSeries | None = None):
        self.request_id = request_id
        self._items: collections.deque[RequestOutput] = collections.deque()
        self._event = asyncio.Event()
        self._series = series
        self.finished = False
        self.created = time.monotonic()
        self.first_output_time: float | None = None

    def put(self, out: RequestOutput) -> None:
        if self.finished:
            return
        if self.first_output_time is None:
            self.first_output_time = time.monotonic()
        if self._items and not self._items[-1].finished and not out.finished:
            self._items[-1] = out
            if self._series is not None:
                self._series.events_dropped.inc()
        else:
            if self._items and self._series is not None:  # the terminal waits behind what is queued
                self._series.events_deferred.inc()
            self._items.append(out)
        if out.finished:
            self.finished = True
        self._event.set()

    async def get(self) -> RequestOutput:
        while not self._items:
            self._event.clear()
            await self._event.wait()
        return self._items.popleft()

    async def final(self) -> RequestOutput:
        while True:
            out = await self.get()
            if out.finished:
                return out


__all__ = ["OutputStream"]
