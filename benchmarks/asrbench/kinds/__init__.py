"""Kind registry: name -> (run function, default config)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.asrbench.kinds import batch, cold_start, load, longform, single, streaming, throughput
from benchmarks.asrbench.kinds.base import KindContext

KindFn = Callable[[KindContext, dict[str, Any]], None]

KINDS: dict[str, tuple[KindFn, dict[str, Any]]] = {
    "cold_start": (cold_start.run, cold_start.DEFAULTS),
    "single": (single.run, single.DEFAULTS),
    "batch": (batch.run, batch.DEFAULTS),
    "throughput": (throughput.run, throughput.DEFAULTS),
    "load": (load.run, load.DEFAULTS),
    "longform": (longform.run, longform.DEFAULTS),
    "streaming": (streaming.run, streaming.DEFAULTS),
}
