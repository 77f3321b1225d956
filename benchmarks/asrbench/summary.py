"""Summaries derived from a run's raw records ONLY (run.json + *.jsonl), so `recompute`
reproduces them exactly. Warm-up records are excluded; every percentile carries its `n`.

A point's metrics (when they apply):
    latency_ms_p50/p90/p99/mean   per request (per batch for `batch`), nearest-rank
    rtfx                          audio seconds / wall seconds (makespan for concurrent kinds)
    req_per_s                     requests / wall seconds
    wer, empty_rate, error_rate   normalized corpus WER; empty transcripts; failed requests
    send_lag_ms_p50/p99           open-loop load: how late requests left vs their schedule
    first_partial_ms_*, final_latency_ms_*, partial_interval_ms_*, late_chunk_pct   streaming
`spread` holds each metric's observed noise (IQR of per-request values, or the range over
repeats) that `compare` requires a difference to exceed.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from typing import Any

from benchmarks.asrbench.stats import distribution, iqr, rnd, wer

SCHEMA = 2
CONCURRENT_KINDS = ("throughput", "load")


def _references(meta: dict[str, Any], benchmark: str) -> dict[str, str]:
    workload = meta["benchmarks"].get(benchmark, {}).get("workload")
    described = meta["workload"]["workloads"].get(workload, {})
    return {i["id"]: i["text"] for i in described.get("items", []) if i.get("text")}


def _accuracy(records: list[dict[str, Any]], refs: dict[str, str]) -> dict[str, Any]:
    scored = [r for r in records if r["ok"] and r["item_id"] in refs]
    return wer([refs[r["item_id"]] for r in scored], [r["text"] for r in scored])


def _wall_metrics(records: list[dict[str, Any]], kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """rtfx and req/s: sequential kinds sum their latencies, concurrent kinds use the makespan
    (per repeat, median over repeats, spread = range over repeats)."""
    if kind == "batch":
        batches = {r["batch_seq"]: r for r in records}.values()
        wall = sum(b["latency_ms"] for b in batches) / 1000.0
        audio = sum(r["audio_s"] for r in records)
        return ({"rtfx": rnd(audio / wall) if wall else None, "req_per_s": rnd(len(records) / wall) if wall else None},
                {})
    if kind not in CONCURRENT_KINDS:
        wall = sum(r["latency_ms"] for r in records) / 1000.0
        audio = sum(r["audio_s"] for r in records)
        return ({"rtfx": rnd(audio / wall) if wall else None, "req_per_s": rnd(len(records) / wall) if wall else None},
                {})
    by_repeat: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_repeat[r.get("repeat", 0)].append(r)
    rtfx, rps = [], []
    for reps in by_repeat.values():
        span = (max(r["done_ms"] for r in reps) - min(r["sched_ms"] for r in reps)) / 1000.0
        if span > 0:
            rtfx.append(sum(r["audio_s"] for r in reps) / span)
            rps.append(len(reps) / span)
    metrics = {"rtfx": rnd(statistics.median(rtfx)) if rtfx else None,
               "req_per_s": rnd(statistics.median(rps)) if rps else None, "repeats": len(rtfx)}
    spread = {"rtfx": rnd(max(rtfx) - min(rtfx)) if len(rtfx) > 1 else None,
              "req_per_s": rnd(max(rps) - min(rps)) if len(rps) > 1 else None}
    return metrics, spread


def _request_point(kind: str, records: list[dict[str, Any]], refs: dict[str, str]) -> dict[str, Any]:
    ok = [r for r in records if r["ok"]]
    timed = list({r["batch_seq"]: r for r in ok}.values()) if kind == "batch" else ok
    latencies = [r["latency_ms"] for r in timed]
    metrics: dict[str, Any] = {"n": len(records), "n_ok": len(ok),
                               "error_rate": rnd((len(records) - len(ok)) / len(records)),
                               "audio_s": rnd(sum(r["audio_s"] for r in records)), "n_timed": len(latencies)}
    metrics.update(distribution(latencies, "latency_ms"))
    spread: dict[str, Any] = {f"latency_ms_{p}": rnd(iqr(latencies)) for p in ("p50", "p90", "p99", "mean")}
    wall, wall_spread = _wall_metrics(ok, kind) if ok else ({"rtfx": None, "req_per_s": None}, {})
    metrics.update(wall)
    spread.update(wall_spread)
    if kind == "load" and any(r.get("rate_rps") for r in records):
        lags = [r["send_lag_ms"] for r in ok]
        metrics.update({"rate_rps": records[0]["rate_rps"], "send_lag_ms_p50": rnd(statistics.median(lags)) if lags
                        else None})
        metrics["send_lag_ms_p99"] = distribution(lags, "x")["x_p99"]
    if kind == "batch":
        metrics["batch_size"] = records[0]["batch_size"]
    if "concurrency" in records[0] or "clients" in records[0]:
        metrics["concurrency"] = records[0].get("concurrency", records[0].get("clients"))
    if kind == "cold_start" and ok:
        for key in ("process_ms", "import_ms", "start_ms", "first_request_ms", "init_s", "warm_request_ms"):
            values = [r[key] for r in ok if key in r]
            metrics[f"{key}_mean"] = rnd(statistics.mean(values)) if values else None
    if kind in ("single", "longform"):
        by_bucket: dict[str, list[float]] = defaultdict(list)
        for r in ok:
            if r.get("bucket"):
                by_bucket[r["bucket"]].append(r["latency_ms"])
        for bucket, values in sorted(by_bucket.items()):
            metrics.update(distribution(values, f"bucket.{bucket}.latency_ms"))
    metrics.update(_accuracy(records, refs))
    return _point(ok, records, metrics, spread)


def _point(ok: list[dict[str, Any]], records: list[dict[str, Any]], metrics: dict[str, Any],
           spread: dict[str, Any]) -> dict[str, Any]:
    point: dict[str, Any] = {"status": "ok" if ok else "failed", "metrics": metrics, "spread": spread}
    errors = [r["error"] for r in records if not r["ok"]]
    if errors:
        point["first_error"] = errors[0]
        if not ok:
            point["reason"] = errors[0]
    return point


def _session_point(records: list[dict[str, Any]], refs: dict[str, str]) -> dict[str, Any]:
    ok = [r for r in records if r["ok"]]
    firsts = [r["first_partial_ms"] for r in ok if r["first_partial_ms"] is not None]
    finals = [r["final_latency_ms"] for r in ok if r["final_latency_ms"] is not None]
    intervals = [b - a for r in ok for a, b in itertools.pairwise(r["partial_times_ms"])]
    chunks = sum(r["chunks"] for r in ok)
    metrics: dict[str, Any] = {"n": len(records), "n_ok": len(ok),
                               "error_rate": rnd((len(records) - len(ok)) / len(records)),
                               "audio_s": rnd(sum(r["audio_s"] for r in records)),
                               "n_first_partial": len(firsts), "n_intervals": len(intervals),
                               "late_chunk_pct": rnd(100.0 * sum(r["late_chunks"] for r in ok) / chunks) if chunks
                               else None,
                               "partials_per_session": rnd(statistics.mean(len(r["partial_times_ms"]) for r in ok))
                               if ok else None}
    metrics.update(distribution(firsts, "first_partial_ms"))
    metrics.update(distribution(finals, "final_latency_ms"))
    metrics.update(distribution(intervals, "partial_interval_ms"))
    spread = {f"{m}_{p}": rnd(iqr(v)) for m, v in (("first_partial_ms", firsts), ("final_latency_ms", finals),
                                                      ("partial_interval_ms", intervals))
              for p in ("p50", "p90", "p99", "mean")}
    metrics.update(_accuracy(records, refs))
    return _point(ok, records, metrics, spread)


def _resources(samples: list[dict[str, Any]]) -> dict[str, Any]:
    by_role: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        by_role[s["role"]].append(s)
    out: dict[str, Any] = {}
    for role, rows in sorted(by_role.items()):
        out[role] = {"n": len(rows), "cpu_pct_mean": rnd(statistics.mean(r["cpu_pct"] for r in rows)),
                     "cpu_pct_max": rnd(max(r["cpu_pct"] for r in rows)),
                     "rss_mb_max": rnd(max(r["rss_mb"] for r in rows))}
        loads = [r["loadavg1"] for r in rows if "loadavg1" in r]
        if loads:
            out[role]["loadavg1_mean"] = rnd(statistics.mean(loads))
    return out


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """`run` as returned by records.load_run."""
    meta = run["meta"]
    points: dict[str, Any] = {}
    for name, status in meta["benchmarks"].items():
        if status["status"] != "ok":
            points[f"{name}/*"] = {"status": status["status"], "reason": status.get("reason", ""),
                                   "kind": status["kind"]}
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in run["requests"]:
        if r["phase"] == "measure":
            grouped[(r["benchmark"], r["kind"], r["point"])].append(r)
    for (bench, kind, point), recs in sorted(grouped.items()):
        points[f"{bench}/{point}"] = {**_request_point(kind, recs, _references(meta, bench)), "kind": kind}
    sessions: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for s in run["sessions"]:
        if s["phase"] == "measure":
            sessions[(s["benchmark"], s["point"])].append(s)
    for (bench, point), recs in sorted(sessions.items()):
        points[f"{bench}/{point}"] = {**_session_point(recs, _references(meta, bench)), "kind": "streaming"}
    return {
        "schema": SCHEMA,
        "run_id": meta["run_id"],
        "dir": meta.get("dir", meta["run_id"]),
        "tag": meta.get("tag"),
        "profile": meta["profile"]["name"],
        "workload_hash": meta["workload"]["hash"],
        "backend": meta["backend"]["name"],
        "label": meta["backend"]["label"],
        "simulated": meta["backend"]["simulated"],
        "status": meta["status"],
        "points": dict(sorted(points.items())),
        "resources": _resources(run["resources"]),
    }
