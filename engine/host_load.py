"""How busy the host's cores are with work other than this process (Linux /proc; elsewhere unknown).

A multi-threaded op ends in a barrier that waits for every thread of its team: on a core another
process holds, that wait is a scheduler slice. A decoder step is a hundred-odd small ops, so on a
busy host it pays that wait a hundred times: the 601 s long-form recording decoded in 7.5-8.1 s
with its offline steps on both cores of an idle 2-core host, and in 45-99 s with one other
busy process (34 s on one thread). The runner widens a step only while the other cores are free
(engine/models/whisper/step_threads.py `StepThreads.narrow`). Only speed depends on it: a step's numbers are
the same on one thread or two.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

SAMPLE_EVERY_S = 0.5
"""Seconds between readings: a decision uses the load of the last such interval."""
OTHERS_IDLE_CORES = 0.25
"""Cores' worth of other processes' work the host may run while this one widens its steps."""


def read_proc_stat() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of all cores since boot, from /proc/stat; None where unreadable."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return (total - idle) / hz, total / hz


def own_cpu_seconds() -> float:
    """CPU seconds this process (every thread) has used."""
    t = os.times()
    return t.user + t.system


class HostLoad:
    """Other processes' CPU use, sampled at most every SAMPLE_EVERY_S."""

    def __init__(self, read: Callable[[], tuple[float, float] | None] = read_proc_stat,
                 own: Callable[[], float] = own_cpu_seconds, clock: Callable[[], float] = time.monotonic):
        self._read, self._own, self._clock = read, own, clock
        self._last: tuple[float, float, float] | None = None  # (when, busy seconds, own seconds)
        self.others = 0.0
        """Cores' worth of work other processes did over the last interval (0 until measured)."""
        self.known = read() is not None
        self._sample()

    def _sample(self) -> None:
        stat = self._read()
        if stat is None:
            return
        now, own = self._clock(), self._own()
        if self._last is not None:
            when, busy, own_before = self._last
            elapsed = now - when
            if elapsed > 0:
                self.others = max(0.0, (stat[0] - busy) - (own - own_before)) / elapsed
        self._last = (now, stat[0], own)

    def others_idle(self) -> bool:
        """Whether other processes left the cores free over the last interval (unknown: False)."""
        if not self.known:
            return False
        if self._last is None or self._clock() - self._last[0] >= SAMPLE_EVERY_S:
            self._sample()
        return self.others <= OTHERS_IDLE_CORES


__all__ = ["OTHERS_IDLE_CORES", "SAMPLE_EVERY_S", "HostLoad"]
