"""load: latency under load.

closed loop  N clients, each sending its next request when the previous answer arrives
             (point `closed-c{N}`); latency from the actual send.
open loop    seeded Poisson arrivals at an absolute rate (`open-{r}rps`) or a fraction of the
             capacity the throughput kind measured (`open-{f}cap`), each sent at its scheduled
             time by a dispatcher with absolute due times; latency counts from the SCHEDULED
             time (no coordinated omission) and `send_lag_ms` says how late the send was.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from benchmarks.asrbench.kinds.base import KindContext, sleep_until, timed_request

DEFAULTS: dict[str, Any] = {"concurrency": [1, 2], "rates": [], "rate_fractions": [0.5], "num_requests": 0,
                            "warmup": 1, "max_inflight": 64}
"""concurrency: closed-loop client counts; rates (req/s) and rate_fractions (of the capacity the
throughput benchmark measured) are open-loop points; num_requests 0 = the workload's items;
warmup: requests per client before each closed-loop level (`all`: one full pass)."""
START_SLACK_S = 0.05
"""The first open-loop arrival is scheduled this far ahead so it is not born late."""


class LoadError(RuntimeError):
    pass


def _closed(ctx: KindContext, clients: int, count: int, phase: str) -> None:
    utts = ctx.utterances(count)
    counter = itertools.count()
    lock = threading.Lock()
    point = f"closed-c{clients}"

    def client() -> None:
        while True:
            with lock:
                seq = next(counter)
            if seq >= count:
                return
            timed_request(ctx, ctx.backend.transcribe, utts[seq], kind="load", point=point, phase=phase, seq=seq,
                          clients=clients)

    threads = [threading.Thread(target=client, name=f"client-{i}") for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _open(ctx: KindContext, rate: float, point: str, count: int, seed: int, max_inflight: int) -> None:
    if rate <= 0:
        raise LoadError(f"open-loop rate must be > 0, got {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    offsets = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    utts = ctx.utterances(count)
    start = time.perf_counter() + START_SLACK_S
    with ThreadPoolExecutor(max_workers=max_inflight, thread_name_prefix="open") as pool:
        for seq, (utt, off) in enumerate(zip(utts, offsets, strict=True)):
            due = start + float(off)
            sleep_until(due)
            pool.submit(timed_request, ctx, ctx.backend.transcribe, utt, kind="load", point=point,
                        phase="measure", seq=seq, sched=due, rate_rps=round(rate, 4))


def run(ctx: KindContext, cfg: dict[str, Any]) -> None:
    count = int(cfg["num_requests"]) or len(ctx.workload.items)
    for clients in cfg["concurrency"]:
        clients = int(clients)
        warm = count if cfg["warmup"] == "all" else clients * int(cfg["warmup"])
        if warm:
            _closed(ctx, clients, warm, "warmup")
        _closed(ctx, clients, count, "measure")
    points: list[tuple[float, str]] = [(float(r), f"open-{r}rps") for r in cfg["rates"]]
    if cfg["rate_fractions"]:
        capacity = ctx.shared.get("capacity_rps")
        if not capacity:
            raise LoadError("open-loop fractions of capacity need a throughput benchmark earlier in the profile")
        points += [(float(f) * capacity, f"open-{f}cap") for f in cfg["rate_fractions"]]
    for k, (rate, point) in enumerate(points):
        _open(ctx, rate, point, count, ctx.seed + k, int(cfg["max_inflight"]))
