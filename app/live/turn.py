"""A realtime session's turn (item): one engine streaming request and what was sent for it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from app.engine_service import OutputStream


@dataclass(eq=False)
class Turn:
    """One item: an engine streaming request fed with the turn's audio."""

    item_id: str
    stream: OutputStream
    start: int
    """Session clock (model-rate samples) at the turn's first sample."""
    opened_at: float = field(default_factory=time.monotonic)
    fed: int = 0
    """Samples handed to the engine so far."""
    arrivals: list[tuple[int, float]] = field(default_factory=list)
    """(fed samples after a chunk, monotonic time it was fed), to date the audio a partial covers."""
    committed: asyncio.Event = field(default_factory=asyncio.Event)
    input_closed_at: float | None = None
    sent_text: str = ""
    partials: int = 0
    answered: bool = False
    """Its terminal event (completed / failed) is out, or on its way."""
    pump: asyncio.Task[None] | None = None
    _cursor: int = 0

    @property
    def request_id(self) -> str:
        return self.stream.request_id

    def fed_at(self, samples: int) -> float:
        """When the turn's audio up to `samples` had been fed (covered audio only grows, so a
        cursor makes each lookup O(1) amortized)."""
        while self._cursor < len(self.arrivals) - 1 and self.arrivals[self._cursor][0] < samples:
            self._cursor += 1
        return self.arrivals[self._cursor][1] if self.arrivals else self.opened_at


def samples_ms(samples: int, rate: int) -> int:
    return samples * 1000 // rate


def elapsed_ms(since: float) -> int:
    return max(0, round((time.monotonic() - since) * 1000))
