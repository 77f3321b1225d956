"""One run: a profile against one backend, recorded into a fresh run directory.

Each benchmark runs in order; a benchmark the backend cannot serve is recorded as
`unsupported` with the backend's reason, one that raises is `failed` with the error, and
the run goes on with the next. run.json is rewritten after every benchmark, so an
interrupted run keeps what it completed.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.asrbench import SUITE_VERSION, backends, datasets, profiles
from benchmarks.asrbench.backends.base import Backend
from benchmarks.asrbench.kinds import KINDS
from benchmarks.asrbench.kinds.base import KindContext
from benchmarks.asrbench.monitor import Monitor
from benchmarks.asrbench.records import Recorder, environment, load_run, new_run_dir, write_json
from benchmarks.asrbench.summary import summarize
from benchmarks.asrbench.workloads import Workload, resolve

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 2


def resolve_workloads(profile: dict[str, Any]) -> dict[str, Workload]:
    seed = int(profile["defaults"]["seed"])
    return {name: resolve(name, spec, datasets.ensure(spec["dataset"]), seed)
            for name, spec in profile["workloads"].items()}


def run(profile_ref: str, backend_name: str, option_pairs: list[str], *,
        overrides: profiles.Overrides | None = None, tag: str | None = None, out: Path | None = None,
        monitor: bool = True, group: str | None = None, only: list[str] | None = None) -> Path:
    """Run every benchmark of the profile against the backend; returns the run directory.
    (`group` and `only` are the pre-2.0 spellings of `tag` and `overrides.only`.)"""
    overrides = overrides or profiles.Overrides()
    if only:
        overrides.only = only
    profile = profiles.resolve(profile_ref, overrides)
    backend = backends.create(backend_name, option_pairs)
    loads = resolve_workloads(profile)
    run_dir, run_id = new_run_dir(profile["name"], backend.label, out)
    (run_dir / "workloads").mkdir()
    for name, w in loads.items():
        write_json(run_dir / "workloads" / f"{name}.json", w.describe())
    simulated = backend.simulated or any(w.dataset.simulated for w in loads.values())
    t0 = time.perf_counter()
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "suite_version": SUITE_VERSION, "run_id": run_id, "dir": run_dir.name,
        "tag": tag or group, "status": "running",
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "finished_utc": None,
        "t0_perf": t0, "profile": profile,
        "workload": {"hash": profiles.workload_hash(profile, {n: w.id for n, w in loads.items()}),
                     "workloads": {n: w.describe() for n, w in loads.items()}},
        "backend": {"name": backend.name, "label": backend.label, "options": backend.options,
                    "option_pairs": option_pairs, "simulated": simulated},
        "environment": environment(),
        "benchmarks": {},
    }
    write_json(run_dir / "run.json", meta)
    logger.info("run %s: profile %s, backend %s", run_dir.name, profile["name"], backend.label)
    for note in profile["notes"]:
        logger.info("note: %s", note)
    recorder = Recorder(run_dir, {"simulated": True} if simulated else None)
    first = next(iter(loads.values()))
    ctx = KindContext(backend=backend, workload=first, recorder=recorder, t0=t0, seed=int(profile["defaults"]["seed"]),
                      backend_name=backend_name, backend_pairs=option_pairs)
    interval = float(profile["defaults"]["monitor_interval_s"]) if monitor else None
    try:
        _run_benchmarks(ctx, backend, profile, loads, meta, run_dir, interval)
    finally:
        recorder.close()
    failed = any(b["status"] == "failed" for b in meta["benchmarks"].values())
    meta["status"] = "failed" if failed else "ok"
    meta["finished_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json(run_dir / "run.json", meta)
    write_json(run_dir / "summary.json", summarize(load_run(run_dir)))
    return run_dir


def _run_benchmarks(ctx: KindContext, backend: Backend, profile: dict[str, Any], loads: dict[str, Workload],
                    meta: dict[str, Any], run_dir: Path, monitor_interval: float | None) -> None:
    benches = list(profile["benchmarks"])
    # cold_start first: its child process must not compete with a backend this process holds.
    for b in [b for b in benches if b["kind"] == "cold_start"]:
        _one(ctx, b, loads, meta, backend.capabilities())
        benches.remove(b)
    write_json(run_dir / "run.json", meta)
    if not benches:
        return
    monitor = None
    try:
        backend.start()
        meta["backend"]["info"] = backend.info()
        if monitor_interval:
            monitor = Monitor(run_dir / "resources.jsonl", {"bench": os.getpid(), **backend.pids()}, monitor_interval)
        capabilities = backend.capabilities()
        for b in benches:
            _one(ctx, b, loads, meta, capabilities)
            write_json(run_dir / "run.json", meta)
    except Exception as exc:  # backend start failure: every benchmark not yet run fails with the reason
        logger.exception("backend %s failed", backend.label)
        for b in benches:
            meta["benchmarks"].setdefault(b["name"], {"kind": b["kind"], "workload": b["workload"], "status": "failed",
                                                      "reason": f"backend failed: {exc}"})
    finally:
        if monitor is not None:
            monitor.stop()
        backend.stop()


def _one(ctx: KindContext, bench: dict[str, Any], loads: dict[str, Workload], meta: dict[str, Any],
         capabilities: dict[str, Any]) -> None:
    name, kind = bench["name"], bench["kind"]
    cap = capabilities.get(kind)
    entry: dict[str, Any] = {"kind": kind, "workload": bench["workload"], "workload_id": loads[bench["workload"]].id}
    meta["benchmarks"][name] = entry
    if cap is not None and not cap.supported and kind == "longform" and bench.get("allow_bounded"):
        logger.info("%s: the backend bounds input length (%s); run anyway (allow_bounded)", name, cap.reason)
    elif cap is None or not cap.supported:
        entry.update(status="unsupported", reason=cap.reason if cap else "not declared by the backend")
        logger.info("%s: unsupported (%s)", name, entry["reason"])
        return
    ctx.workload, ctx.benchmark = loads[bench["workload"]], name
    ctx._utterances = {}
    started = time.perf_counter()
    try:
        KINDS[kind][0](ctx, bench)
        entry.update(status="ok", note=cap.reason)
    except Exception as exc:  # one broken benchmark must not lose the others' data
        logger.exception("benchmark %s failed", name)
        entry.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
    entry.update(started_ms=ctx.ms(started), ended_ms=ctx.ms(time.perf_counter()))
    logger.info("%s: %s in %.1f s", name, entry["status"], (entry["ended_ms"] - entry["started_ms"]) / 1000)
