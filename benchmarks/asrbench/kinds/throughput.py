"""throughput: all requests outstanding at once (up to the backend's concurrency); makespan.

RTFx = audio seconds / makespan, req/s = requests / makespan, per repeat; the median is
reported and the spread across repeats feeds the noise-aware compare. Leaves the measured
capacity (req/s) for open-loop load points expressed as fractions of capacity.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.asrbench.kinds.base import KindContext, timed_request

DEFAULTS: dict[str, Any] = {"num_requests": 0, "repetitions": 2, "warmup": 1, "concurrency": 0}
"""num_requests 0 = the workload's items; concurrency 0 = what the backend declares."""


def _wave(ctx: KindContext, count: int, concurrency: int, phase: str, rep: int) -> float:
    utts = ctx.utterances(count)
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tput") as pool:
        records = list(pool.map(
            lambda su: timed_request(ctx, ctx.backend.transcribe, su[1], kind="throughput", point="default",
                                     phase=phase, seq=su[0], repeat=rep, concurrency=concurrency),
            enumerate(utts)))
    makespan_s = (max(r["done_ms"] for r in records) - min(r["send_ms"] for r in records)) / 1000.0
    return count / makespan_s if makespan_s > 0 else 0.0


def run(ctx: KindContext, cfg: dict[str, Any]) -> None:
    concurrency = int(cfg["concurrency"]) or ctx.backend.concurrency()
    count = int(cfg["num_requests"]) or len(ctx.workload.items)
    warm = count if cfg["warmup"] == "all" else concurrency * int(cfg["warmup"])
    if warm:
        _wave(ctx, warm, concurrency, "warmup", 0)
    rates = [_wave(ctx, count, concurrency, "measure", rep) for rep in range(int(cfg["repetitions"]))]
    ctx.shared["capacity_rps"] = statistics.median(rates)
