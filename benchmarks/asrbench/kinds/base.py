"""What every kind shares: the run context, request timing, and deterministic clip selection."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.asrbench.backends.base import Backend, Utterance
from benchmarks.asrbench.records import Recorder
from benchmarks.asrbench.workloads import Workload

logger = logging.getLogger(__name__)


@dataclass
class KindContext:
    backend: Backend
    workload: Workload
    recorder: Recorder
    t0: float
    """perf_counter() at the start of the run; every *_ms field is relative to it."""
    seed: int
    backend_name: str
    backend_pairs: list[str]
    benchmark: str = ""
    """Name of the benchmark being run (records carry it; a profile may run one kind twice)."""
    shared: dict[str, Any] = field(default_factory=dict)
    """Results one kind leaves for a later one (e.g. measured capacity for open-loop load)."""
    _utterances: dict[int, Utterance] = field(default_factory=dict, repr=False)

    def ms(self, t: float) -> float:
        return round((t - self.t0) * 1000.0, 3)

    def utterances(self, count: int | None = None, offset: int = 0) -> list[Utterance]:
        """`count` items of the workload in its order from `offset`, wrapping around (all of
        them when None): deterministic."""
        items = self.workload.items
        count = len(items) if count is None else count
        out = []
        for k in range(count):
            index = (offset + k) % len(items)
            if index not in self._utterances:
                w = items[index]
                utt = Utterance(w.uid, self.workload.audio(w), w.text or "", bucket=w.bucket)
                self.backend.prepare(utt)  # payload encoding stays outside every timed window
                self._utterances[index] = utt
            out.append(self._utterances[index])
        return out

    def warmup_count(self, cfg: dict[str, Any], measured: int) -> int:
        """`warmup: all` is a full pass over what will be measured; an integer is that many items."""
        return measured if cfg["warmup"] == "all" else int(cfg["warmup"])


def timed_request(ctx: KindContext, fn: Callable[[Utterance], str], utt: Utterance, *, kind: str, point: str,
                  phase: str, seq: int, sched: float | None = None, **extra: Any) -> dict[str, Any]:
    """Call `fn(utt)`, time it, and record one request. Latency counts from `sched` when given
    (open loop: the scheduled send time), else from the actual send."""
    send = time.perf_counter()
    try:
        text, ok, error = fn(utt), True, None
    except Exception as exc:  # a failed request is a data point, not a crash of the run
        text, ok, error = "", False, f"{type(exc).__name__}: {exc}"
        logger.warning("%s/%s request %d (%s) failed: %s", kind, point, seq, utt.item_id, error)
    done = time.perf_counter()
    start = send if sched is None else sched
    record = {
        "benchmark": ctx.benchmark or kind, "kind": kind, "point": point, "bucket": utt.bucket, "phase": phase, "seq": seq, "item_id": utt.item_id,
        "audio_s": round(utt.duration_s, 4), "sched_ms": ctx.ms(start), "send_ms": ctx.ms(send),
        "done_ms": ctx.ms(done), "latency_ms": round((done - start) * 1000.0, 3),
        "send_lag_ms": round((send - start) * 1000.0, 3), "ok": ok, "error": error, "text": text, **extra,
    }
    ctx.recorder.request(record)
    return record


def sleep_until(deadline: float) -> None:
    """Sleep to an absolute perf_counter deadline (absolute, so lateness never accumulates)."""
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)
