"""Freeze the Python heap after an engine is built, so full collections skip it.

A full garbage collection walks every tracked object; over a constructed engine (model modules,
tokenizer tables, caches) that stops the step loop for 162-170 ms in the reference design's
measurement, a step in which every live stream stalls. `gc.freeze()` moves everything alive now
into a permanent generation the collector ignores; objects allocated later are collected as usual.

The freeze is process-global, so it is reference-counted across engines: the heap is thawed
when the last engine that froze it shuts down. A dropped engine's objects still go away through
reference counting, frozen or not.
"""

from __future__ import annotations

import gc
import logging
import threading

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_holders = 0


YOUNG_GENERATIONS = 1
"""Generations collected before freezing: the young ones, where the garbage of building an engine
is. A full collection walks the whole heap, torch's thousands of modules included: 0.2 s of a
~5 s cold start on a loaded 2-core VM (benchmarks/cold_start.py), to find little more."""


def freeze_heap() -> bool:
    """Collect the young generations, then freeze what survives; returns True (the caller must
    `thaw_heap()` once)."""
    global _holders
    with _lock:
        if gc.isenabled():
            gc.collect(YOUNG_GENERATIONS)
        # else automatic collection is off (the server's start-up pause, app/startup_gc.py): every
        # object since the pause is still young, so the pass would walk the whole heap (0.18 s
        # after torch's import) to free about 1 MB of start-up garbage (measured: no tensors, RSS
        # +0.5 MB when frozen uncollected); it is frozen with the rest instead.
        gc.freeze()
        _holders += 1
        logger.debug("python heap frozen (%d objects permanent, %d holder(s))", gc.get_freeze_count(), _holders)
    return True


def thaw_heap() -> None:
    """Release one hold; the last one moves the frozen objects back under collection."""
    global _holders
    with _lock:
        _holders = max(0, _holders - 1)
        if _holders == 0:
            gc.unfreeze()
