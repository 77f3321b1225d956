"""The offline backlog: accepted work not yet transcribed, in audio-seconds, and the rate at which
the engine gets through it, measured; their ratio is the expected queue delay of new offline
work, which admission compares with `max_queue_delay_secs` (HTTP 503 + Retry-After, gRPC
RESOURCE_EXHAUSTED + grpc-retry-pushback-ms).

Why audio-seconds and a measured rate rather than a request count: a count of 64 is a second of
work for 1 s clips and an hour for meeting recordings. The rate is measured from the progress the
engine reports (Whisper's offline decoder reports every finished 30 s window; other families
report at the end), smoothed over `RATE_TAU_S`, and measured only while there is work, so an
idle server keeps its last estimate. Before anything has been measured, the age of the oldest
outstanding request bounds the delay from below, so a burst at start-up is shed too.

Event-loop only (the bridge calls it from its dispatch), so no lock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

RATE_TAU_S = 10.0
"""Seconds over which the throughput estimate forgets older measurements (exponential smoothing)."""
MIN_SAMPLE_S = 0.5
"""Shortest interval one throughput sample spans: outputs of one step arrive together."""


@dataclass
class _Work:
    seconds: float
    priority: int
    added: float
    done: float = 0.0


class Backlog:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._work: dict[str, _Work] = {}
        self.rate: float | None = None
        """Measured audio-seconds transcribed per second while busy (None until measured)."""
        self._since: float | None = None  # start of the current sample (None while idle)
        self._progress = 0.0  # audio-seconds done since `_since`

    @property
    def seconds(self) -> float:
        """Audio-seconds accepted and not yet transcribed."""
        return sum(max(0.0, w.seconds - w.done) for w in self._work.values())

    def add(self, request_id: str, seconds: float, priority: int = 0) -> None:
        now = self._clock()
        if not self._work:
            self._since, self._progress = now, 0.0
        self._work[request_id] = _Work(seconds, priority, now)

    def progress(self, request_id: str, decoded_seconds: float, finished: bool) -> None:
        """An output of a tracked request: `decoded_seconds` of its audio are done (all when finished)."""
        work = self._work.get(request_id)
        if work is None:
            return
        done = work.seconds if finished else min(max(decoded_seconds, work.done), work.seconds)
        self._progress += done - work.done
        work.done = done
        now = self._clock()
        if self._since is not None and now - self._since >= MIN_SAMPLE_S:
            span = now - self._since
            sample = self._progress / span
            weight = 1.0 - math.exp(-span / RATE_TAU_S)
            self.rate = sample if self.rate is None else self.rate + weight * (sample - self.rate)
            self._since, self._progress = now, 0.0
        if finished:
            self.forget(request_id)

    def forget(self, request_id: str) -> None:
        """A tracked request left (finished, aborted or failed)."""
        if self._work.pop(request_id, None) is not None and not self._work:
            self._since = None  # idle: the rate keeps its last value

    def delay(self, priority: int = 0) -> float:
        """Expected seconds before new work at `priority` (lower is sooner) starts being served:
        the work ahead of it over the measured rate; before a measurement, the oldest
        outstanding request's age."""
        ahead = sum(max(0.0, w.seconds - w.done) for w in self._work.values() if w.priority <= priority)
        if not ahead:
            return 0.0
        if self.rate:
            return ahead / self.rate
        return self._clock() - min(w.added for w in self._work.values() if w.priority <= priority)

    def retry_after(self, limit: float, priority: int = 0) -> int | None:
        """Whole seconds after which the delay should be back under `limit`, or None when it is
        under it now (admit). At least 1."""
        delay = self.delay(priority)
        if delay <= limit:
            return None
        return max(1, math.ceil(delay - limit))


__all__ = ["MIN_SAMPLE_S", "RATE_TAU_S", "Backlog"]
