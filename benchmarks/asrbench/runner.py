"""One benchmark run: a profile against one backend, recorded into a fresh run directory."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.asrbench import backends, datasets, profiles
from benchmarks.asrbench.backends.base import Backend
from benchmarks.asrbench.datasets import Dataset
from benchmarks.asrbench.kinds import KINDS
from benchmarks.asrbench.kinds.base import KindContext
from benchmarks.asrbench.monitor import Monitor
from benchmarks.asrbench.records import Recorder, environment, load_run, new_run_dir, write_json
from benchmarks.asrbench.summary import summarize

logger = logging.getLogger(__name__)

RUN_SCHEMA = 1


def _select(ds: Dataset, max_clip_s: float | None) -> Dataset:
    """Short-utterance kinds use clips up to `max_clip_s` (long audio is the longform kind's job)."""
    if max_clip_s is None:
        return ds
    items = [i for i in ds.items if i.duration_s <= max_clip_s]
    if not items:
        raise datasets.DatasetError(f"dataset {ds.name}: no clip is <= {max_clip_s} s")
    return replace(ds, items=items, _cache=ds._cache)


def _workload(profile: dict[str, Any]) -> tuple[dict[str, Dataset], dict[str, Any]]:
    main = _select(datasets.ensure(profile["dataset"]), profile.get("max_clip_s"))
    sets = {main.name: main}
    for cfg in profile["kinds"].values():
        if "dataset" in cfg and cfg["dataset"] not in sets:
            sets[cfg["dataset"]] = datasets.ensure(cfg["dataset"])
    described = {name: {"id": ds.id, "kind": ds.kind,
                        "items": [{"id": i.id, "text": i.text, "duration_s": i.duration_s, "sha256": i.sha256}
                                  for i in ds.items]}
                 for name, ds in sets.items()}
    return sets, described


def run(profile_name: str, backend_name: str, option_pairs: list[str], group: str | None = None,
        only: list[str] | None = None) -> Path:
    """Run every kind of the profile (or just `only`) against the backend; returns the run directory."""
    profile = profiles.resolve(profile_name, only)
    backend = backends.create(backend_name, option_pairs)
    sets, described = _workload(profile)
    run_dir = new_run_dir(profile_name, backend.label)
    t0 = time.perf_counter()
    meta: dict[str, Any] = {
        "schema": RUN_SCHEMA, "run_id": run_dir.name, "group": group, "status": "running",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "t0_perf": t0,
        "profile": profile,
        "workload": {"hash": profiles.workload_hash(profile, {n: d["id"] for n, d in described.items()}),
                     "datasets": described},
        "backend": {"name": backend.name, "label": backend.label, "options": backend.options,
                    "option_pairs": option_pairs, "simulated": backend.simulated},
        "environment": environment(),
        "kinds": {},
    }
    write_json(run_dir / "run.json", meta)
    logger.info("run %s: profile %s, backend %s", run_dir.name, profile_name, backend.label)
    recorder = Recorder(run_dir, {"simulated": True} if backend.simulated else None)
    ctx = KindContext(backend=backend, dataset=sets[profile["dataset"]], recorder=recorder, t0=t0,
                      seed=int(profile["seed"]), backend_name=backend_name, backend_pairs=option_pairs)
    try:
        _run_kinds(ctx, backend, profile, sets, meta, run_dir)
    finally:
        recorder.close()
    meta["status"] = "failed" if any(k["status"] == "failed" for k in meta["kinds"].values()) else "ok"
    write_json(run_dir / "run.json", meta)
    write_json(run_dir / "summary.json", summarize(load_run(run_dir)))
    return run_dir


def _run_kinds(ctx: KindContext, backend: Backend, profile: dict[str, Any], sets: dict[str, Dataset],
               meta: dict[str, Any], run_dir: Path) -> None:
    kinds = list(profile["kinds"])
    # cold_start first: its child process must not compete with a backend this process holds.
    if "cold_start" in kinds:
        _one_kind(ctx, "cold_start", profile, sets, meta, backend.capabilities())
        kinds.remove("cold_start")
    monitor = None
    try:
        backend.start()
        meta["backend"]["info"] = backend.info()
        monitor = Monitor(run_dir / "resources.jsonl", {"bench": os.getpid(), **backend.pids()})
        capabilities = backend.capabilities()
        for kind in kinds:
            _one_kind(ctx, kind, profile, sets, meta, capabilities)
            write_json(run_dir / "run.json", meta)
    except Exception as exc:  # backend start failure: every kind not yet run fails with the reason
        logger.exception("backend %s failed", backend.label)
        for kind in kinds:
            meta["kinds"].setdefault(kind, {"status": "failed", "reason": f"backend failed: {exc}",
                                            "dataset": profile["kinds"][kind].get("dataset", profile["dataset"])})
    finally:
        if monitor is not None:
            monitor.stop()
        backend.stop()


def _one_kind(ctx: KindContext, kind: str, profile: dict[str, Any], sets: dict[str, Dataset],
              meta: dict[str, Any], capabilities: dict[str, Any]) -> None:
    cfg = profile["kinds"][kind]
    ds_name = cfg.get("dataset", profile["dataset"])
    cap = capabilities.get(kind)
    entry: dict[str, Any] = {"dataset": ds_name}
    meta["kinds"][kind] = entry
    if cap is None or not cap.supported:
        entry.update(status="unsupported", reason=cap.reason if cap else "not declared by the backend")
        logger.info("%s: unsupported (%s)", kind, entry["reason"])
        return
    ctx.dataset = sets[ds_name]
    started = time.perf_counter()
    try:
        KINDS[kind][0](ctx, cfg)
        entry.update(status="ok", note=cap.reason)
    except Exception as exc:  # one broken kind must not lose the others' data
        logger.exception("kind %s failed", kind)
        entry.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
    entry.update(started_ms=ctx.ms(started), ended_ms=ctx.ms(time.perf_counter()))
    logger.info("%s: %s in %.1f s", kind, entry["status"], (entry["ended_ms"] - entry["started_ms"]) / 1000)
