"""Regression gate: compare a candidate run's summary with a baseline's.

Exit codes: 0 ok, 1 regression or a point failed/missing in the candidate, 2 not comparable
(different workload hash, profile, or simulated vs real).

Noise-aware: a metric regresses only when it is worse by MORE than its tolerance AND by more
than the baseline's observed spread for that metric (IQR of per-request values, or the range
over repeats). Tolerances are relative (fraction of the baseline value) unless given as
`{absolute: x}` (used for rates such as WER, where the baseline may be 0).

Thresholds file (YAML or JSON):
    default: 0.10                      # tolerance of metrics listed without one
    metrics:
      latency_ms_p90: 0.20
      wer: {absolute: 0.02}
      rtfx:                            # null: the default tolerance
    kinds:                             # per-kind replacements
      cold_start: {latency_ms_p50: 0.5}
Only metrics listed under `metrics` (or DEFAULT_METRICS when the file has none) are gated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.asrbench.errors import ThresholdsError as ThresholdsError

OK, REGRESSION, NOT_COMPARABLE = 0, 1, 2

HIGHER_IS_BETTER = frozenset({"rtfx", "req_per_s"})
DEFAULT_METRICS: dict[str, Any] = {
    "latency_ms_p50": 0.10,
    "latency_ms_p90": 0.15,
    "rtfx": 0.10,
    "req_per_s": 0.10,
    "wer": {"absolute": 0.02},
    "error_rate": {"absolute": 0.0},
    "empty_rate": {"absolute": 0.0},
    "first_partial_ms_p50": 0.15,
    "final_latency_ms_p50": 0.15,
    "late_chunk_pct": {"absolute": 5.0},
}
DEFAULT_KINDS: dict[str, dict[str, Any]] = {
    # One process start per repeat: few samples, dominated by disk and import caches.
    "cold_start": {"latency_ms_p50": 0.5, "latency_ms_p90": 0.5, "rtfx": 0.5, "req_per_s": 0.5},
}




@dataclass(frozen=True)
class Tolerance:
    value: float
    absolute: bool

    def allowed(self, base: float) -> float:
        return self.value if self.absolute else self.value * abs(base)


@dataclass(frozen=True)
class Thresholds:
    metrics: dict[str, Tolerance]
    """Gated metrics and their tolerances."""
    kinds: dict[str, dict[str, Tolerance]]
    """Per-kind replacements (e.g. cold start, one noisy sample per run, gets a wider band)."""

    def for_point(self, point: str) -> dict[str, Tolerance]:
        # a kind replaces tolerances of gated metrics; it does not gate a metric the file left out
        replaced = self.kinds.get(point.split("/")[0], {})
        return {name: replaced.get(name, tol) for name, tol in self.metrics.items()}


def load_thresholds(path: Path | None) -> Thresholds:
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            text = path.read_text()
            raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text) or {}
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise ThresholdsError(f"cannot read thresholds {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise ThresholdsError(f"{path}: expected a mapping with 'default', 'metrics' and/or 'kinds'")
    default = _tolerance("default", raw.get("default", 0.10))
    metrics = raw.get("metrics") or DEFAULT_METRICS
    kinds = raw.get("kinds", DEFAULT_KINDS)
    if not isinstance(metrics, dict) or not isinstance(kinds, dict) or \
            not all(isinstance(v, dict) for v in kinds.values()):
        raise ThresholdsError("'metrics' must map metric names to tolerances, 'kinds' kind names to such maps")

    def parse(specs: dict[str, Any]) -> dict[str, Tolerance]:
        return {name: default if spec is None else _tolerance(name, spec) for name, spec in specs.items()}

    return Thresholds(parse(metrics), {kind: parse(specs) for kind, specs in kinds.items()})


def _tolerance(name: str, spec: Any) -> Tolerance:
    if isinstance(spec, (int, float)) and spec >= 0:
        return Tolerance(float(spec), False)
    if isinstance(spec, dict) and len(spec) == 1:
        (mode, value), = spec.items()
        if mode in ("absolute", "relative") and isinstance(value, (int, float)) and value >= 0:
            return Tolerance(float(value), mode == "absolute")
    raise ThresholdsError(f"tolerance of {name!r} must be a number >= 0 or {{absolute|relative: number}}, "
                          f"got {spec!r}")


def comparable(base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """Reasons the two runs cannot be compared (empty when they can)."""
    reasons = []
    if base["profile"] != cand["profile"]:
        reasons.append(f"profile differs: {base['profile']} vs {cand['profile']}")
    if base["workload_hash"] != cand["workload_hash"]:
        reasons.append("workload hash differs (different audio, sizes or seed)")
    if base["simulated"] != cand["simulated"]:
        reasons.append("one run is simulated (mock) and the other is not")
    return reasons


def compare(base: dict[str, Any], cand: dict[str, Any], thresholds: Thresholds,
            allow_missing: bool = False) -> tuple[int, list[dict[str, Any]]]:
    """(exit code, one row per gated metric and per missing/failed point). With
    `allow_missing`, results the candidate lacks are listed without failing the gate."""
    if comparable(base, cand):
        return NOT_COMPARABLE, []
    rows: list[dict[str, Any]] = []
    worst = OK
    for point, bp in base["points"].items():
        if bp["status"] != "ok":
            continue  # nothing to hold the candidate to
        cp = cand["points"].get(point)
        if cp is None and allow_missing:
            rows.append({"point": point, "metric": "*", "verdict": "missing (allowed)"})
            continue
        if cp is None or cp["status"] != "ok":
            rows.append({"point": point, "metric": "*", "verdict": "missing" if cp is None else cp["status"]})
            worst = REGRESSION
            continue
        for metric, tol in thresholds.for_point(point).items():
            b, c = bp["metrics"].get(metric), cp["metrics"].get(metric)
            if b is None or c is None:
                continue
            worse_by = (b - c) if metric in HIGHER_IS_BETTER else (c - b)
            spread = bp.get("spread", {}).get(metric) or 0.0
            allowed = tol.allowed(b)
            regressed = worse_by > allowed and worse_by > spread
            rows.append({"point": point, "metric": metric, "base": b, "cand": c,
                         "change": round((c - b) / b, 4) if b else None, "allowed": round(allowed, 4),
                         "spread": spread, "verdict": "REGRESSION" if regressed else "ok"})
            if regressed:
                worst = REGRESSION
    for point, cp in cand["points"].items():
        if point not in base["points"] and cp["status"] == "failed":
            rows.append({"point": point, "metric": "*", "verdict": "failed"})
            worst = REGRESSION
    return worst, rows


def compare_validations(base: dict[str, Any], cand: dict[str, Any],
                        max_wer_points: float) -> tuple[int, str, dict[str, Any]]:
    """Two validation reports: same dataset, revision, items and normaliser, or not comparable;
    a regression when the candidate's WER rose by more than `max_wer_points` or it failed requests."""
    head = f"compare validation {base.get('validation_id')} (base) -> {cand.get('validation_id')} (candidate)"
    if base.get("kind") != "validation" or cand.get("kind") != "validation":
        return NOT_COMPARABLE, head + "\nNOT COMPARABLE: a validation report compares only with another", {}
    differ = [k for k in ("dataset", "revision", "items", "normalizer") if base.get(k) != cand.get(k)]
    if differ:
        detail = ", ".join(f"{k}: {base.get(k)!r} vs {cand.get(k)!r}" for k in differ)
        return NOT_COMPARABLE, f"{head}\nNOT COMPARABLE: {detail}", {"not_comparable": differ}
    b, c = base.get("wer_pct"), cand.get("wer_pct")
    delta = None if b is None or c is None else round(c - b, 2)
    problems = []
    if delta is None or delta > max_wer_points:
        problems.append(f"wer_pct {b} -> {c} ({delta:+} points > {max_wer_points})" if delta is not None
                        else "wer_pct missing")
    if cand.get("failed"):
        problems.append(f"{cand['failed']} failed request(s) in the candidate")
    code = REGRESSION if problems else OK
    text = "\n".join([head, "| metric | base | cand | change | allowed |", "|---|---|---|---|---|",
                      f"| wer_pct | {b} | {c} | {delta} | +{max_wer_points} |",
                      *(f"REGRESSION: {p}" for p in problems), "RESULT: " + ("ok" if code == OK else "REGRESSION")])
    return code, text, {"code": code, "wer_pct": {"base": b, "cand": c, "delta": delta}, "problems": problems}


def render(base: dict[str, Any], cand: dict[str, Any], code: int, rows: list[dict[str, Any]],
           verbose: bool = True) -> str:
    sim = " [SIMULATED]" if base["simulated"] or cand["simulated"] else ""
    head = f"compare {base['run_id']} (base) -> {cand['run_id']} (candidate){sim}"
    if code == NOT_COMPARABLE:
        return "\n".join([head, "NOT COMPARABLE:", *(f"  - {r}" for r in comparable(base, cand))])
    lines = [head, "| point | metric | base | cand | change | allowed | spread | verdict |", "|---" * 8 + "|"]
    for r in rows:
        if not verbose and r["verdict"] == "ok":
            continue
        change = f"{r['change']:+.1%}" if r.get("change") is not None else ""
        lines.append(f"| {r['point']} | {r['metric']} | {r.get('base', '')} | {r.get('cand', '')} | {change} | "
                     f"{r.get('allowed', '')} | {r.get('spread', '')} | {r['verdict']} |")
    lines.append("RESULT: " + ("ok" if code == OK else "REGRESSION"))
    return "\n".join(lines)
