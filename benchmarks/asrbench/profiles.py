"""Profiles: YAML plans naming workloads and the benchmarks to run on them.

A profile file has five top-level keys (unknown keys and parameters are rejected):

    name: latency_only
    description: Single-request latency over duration buckets.
    defaults: {primary: librispeech/test-clean, seed: 0, timeout_s: 60}
    workloads:
      utterances: {dataset: "${primary}", sampling: stratified, num_items: 200}
    benchmarks:
      - {name: single, kind: single, workload: utterances, repetitions: 3}

Built-in profiles (selftest, smoke, standard, full) live in builtin_profiles/. Overrides
apply in a fixed order: --dataset; sweep flags; workload flags; --set; --only/--skip.
The resolved profile is stored in run.json, so a run can be reproduced from its record.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.asrbench import datasets
from benchmarks.asrbench.errors import ProfileError as ProfileError
from benchmarks.asrbench.kinds import KINDS
from benchmarks.asrbench.workloads import WorkloadError, check_spec

logger = logging.getLogger(__name__)



TOP_KEYS = ("name", "description", "defaults", "workloads", "benchmarks")
DEFAULTS: dict[str, Any] = {"primary": datasets.PRIMARY, "seed": 0, "sample_rate": 16000, "timeout_s": 300.0,
                            "monitor_interval_s": 0.25}
BENCH_KEYS = ("name", "kind", "workload")
BUILTIN_DIR = Path(__file__).parent / "builtin_profiles"
PROFILES: dict[str, dict[str, Any]] = {
    p.stem: yaml.safe_load(p.read_text()) for p in sorted(BUILTIN_DIR.glob("*.yaml"))}
"""Built-in profiles by name, in the file form (tests may add their own)."""


@dataclass
class Overrides:
    dataset: str | None = None
    batch_sizes: list[int] | None = None
    concurrency: list[int] | None = None
    rates: list[float] | None = None
    chunk_ms: list[int] | None = None
    sessions: list[int] | None = None
    repetitions: int | None = None
    warmup: str | None = None
    timeout_s: float | None = None
    num_items: int | None = None
    duration_range: list[float | None] | None = None
    seed: int | None = None
    sets: list[str] = field(default_factory=list)
    only: list[str] | None = None
    skip: list[str] | None = None


SWEEPS = {  # flag -> (kinds it applies to, parameter)
    "batch_sizes": (("batch",), "batch_sizes"),
    "concurrency": (("load",), "concurrency"),
    "rates": (("load",), "rates"),
    "chunk_ms": (("streaming",), "chunk_ms"),
    "sessions": (("streaming",), "sessions"),
}


def names() -> list[str]:
    return list(PROFILES)


LEGACY_DATASETS = {"speech": datasets.DEV_SET, "synthetic": "synthetic/default"}
LEGACY_PARAMS = {"repeats": "repetitions", "sizes": "batch_sizes", "closed": "concurrency", "open_rates": "rates",
                 "open_fractions": "rate_fractions", "count": "rounds"}


def from_legacy(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """A pre-2.0 profile (`dataset`, `max_clip_s`, `seed`, `kinds: {kind: settings}`) in the
    five-key form: one workload per kind, `requests: N` becoming the first N clips."""
    logger.warning("deprecated: profile %s uses the pre-2.0 form (dataset/kinds); use name, description, "
                   "defaults, workloads, benchmarks", name)
    primary = LEGACY_DATASETS.get(raw["dataset"], raw["dataset"])
    workloads, benchmarks = {}, []
    for kind, settings in raw["kinds"].items():
        spec: dict[str, Any] = {"dataset": "${primary}", "sampling": "all", "require_text": True}
        if raw.get("max_clip_s"):
            spec["duration_range"] = [0, float(raw["max_clip_s"]) + 1e-6]
        if kind == "longform":
            spec = {"dataset": "longform/${primary_slug}", "sampling": "all", "require_text": True}
        bench: dict[str, Any] = {"name": kind, "kind": kind, "workload": kind}
        for key, value in settings.items():
            if key == "requests":
                spec.update(sampling="first", num_items=int(value))
            elif key in ("chunk_ms", "sessions"):
                bench[key] = [value] if not isinstance(value, list) else value
            elif key != "dataset":
                bench[LEGACY_PARAMS.get(key, key)] = value
        workloads[kind] = spec
        benchmarks.append(bench)
    return {"name": name, "description": raw.get("description", ""),
            "defaults": {"primary": primary, "seed": int(raw.get("seed", 0))},
            "workloads": workloads, "benchmarks": benchmarks}


def load(ref: str) -> dict[str, Any]:
    """A built-in profile by name, or a profile YAML file by path; checked, not yet resolved."""
    if ref in PROFILES and "kinds" in PROFILES[ref]:
        raw = from_legacy(copy.deepcopy(PROFILES[ref]), ref)
    elif ref in PROFILES:
        raw = copy.deepcopy(PROFILES[ref])
    elif ref.endswith((".yaml", ".yml")) or Path(ref).is_file():
        try:
            raw = yaml.safe_load(Path(ref).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ProfileError(f"cannot read profile {ref}: {exc}") from exc
    else:
        raise ProfileError(f"unknown profile {ref!r}; built-in: {', '.join(names())} (or a YAML file)")
    check(raw, ref)
    return raw


def check(raw: Any, where: str) -> None:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: a profile is a mapping with keys {', '.join(TOP_KEYS)}")
    unknown = set(raw) - set(TOP_KEYS)
    missing = {"name", "workloads", "benchmarks"} - set(raw)
    if unknown or missing:
        raise ProfileError(f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}; "
                           f"a profile has {', '.join(TOP_KEYS)}")
    bad_defaults = set(raw.get("defaults") or {}) - set(DEFAULTS)
    if bad_defaults:
        raise ProfileError(f"{where}: unknown defaults {sorted(bad_defaults)}; known: {', '.join(DEFAULTS)}")
    workloads = raw["workloads"]
    if not isinstance(workloads, dict) or not all(isinstance(v, dict) for v in workloads.values()):
        raise ProfileError(f"{where}: workloads maps names to specifications")
    try:
        for wname, spec in workloads.items():
            check_spec(wname, spec)
    except WorkloadError as exc:
        raise ProfileError(f"{where}: {exc}") from exc
    if not isinstance(raw["benchmarks"], list) or not raw["benchmarks"]:
        raise ProfileError(f"{where}: benchmarks is a non-empty list of {{name, kind, workload, ...parameters}}")
    seen = set()
    for b in raw["benchmarks"]:
        if not isinstance(b, dict) or not all(k in b for k in BENCH_KEYS):
            raise ProfileError(f"{where}: benchmark {b!r} needs name, kind and workload")
        if b["kind"] not in KINDS:
            raise ProfileError(f"{where}: benchmark {b['name']}: unknown kind {b['kind']!r}; known: {list(KINDS)}")
        if b["workload"] not in workloads:
            raise ProfileError(f"{where}: benchmark {b['name']}: no workload {b['workload']!r}")
        unknown_params = set(b) - set(BENCH_KEYS) - set(KINDS[b["kind"]][1])
        if unknown_params:
            raise ProfileError(f"{where}: benchmark {b['name']} ({b['kind']}): unknown parameter(s) "
                               f"{sorted(unknown_params)}; known: {sorted(KINDS[b['kind']][1])}")
        if b["name"] in seen:
            raise ProfileError(f"{where}: two benchmarks are named {b['name']!r}")
        seen.add(b["name"])


def _apply_set(profile: dict[str, Any], assignment: str) -> None:
    """`section.field=value`: section is defaults, workloads.<name>, or a benchmark name."""
    key, sep, raw = assignment.partition("=")
    if not sep:
        raise ProfileError(f"--set {assignment!r} is not section.field=value")
    value = yaml.safe_load(raw)
    parts = key.split(".")
    if parts[0] == "defaults" and len(parts) == 2:
        profile.setdefault("defaults", {})[parts[1]] = value
    elif parts[0] == "workloads" and len(parts) == 3 and parts[1] in profile["workloads"]:
        profile["workloads"][parts[1]][parts[2]] = value
    elif len(parts) == 2 and any(b["name"] == parts[0] for b in profile["benchmarks"]):
        next(b for b in profile["benchmarks"] if b["name"] == parts[0])[parts[1]] = value
    else:
        raise ProfileError(f"--set {key}: the section must be defaults, workloads.<name> or a benchmark name "
                           f"({', '.join(b['name'] for b in profile['benchmarks'])})")


def _select(benchmarks: list[dict[str, Any]], only: list[str] | None, skip: list[str] | None) -> list[dict[str, Any]]:
    known = {b["name"] for b in benchmarks} | {b["kind"] for b in benchmarks}
    for flag, sel in (("--only", only), ("--skip", skip)):
        unknown = set(sel or []) - known
        if unknown:
            raise ProfileError(f"{flag}: no benchmark or kind {sorted(unknown)}; the profile has {sorted(known)}")
    if only:
        benchmarks = [b for b in benchmarks if b["name"] in only or b["kind"] in only]
    if skip:
        benchmarks = [b for b in benchmarks if b["name"] not in skip and b["kind"] not in skip]
    if not benchmarks:
        raise ProfileError("--only/--skip left no benchmark to run")
    return benchmarks


def resolve(ref: str, overrides: Overrides | None = None) -> dict[str, Any]:
    """The profile with overrides applied, placeholders expanded and every benchmark's
    parameters filled from its kind's defaults: exactly what a run records."""
    o = overrides or Overrides()
    profile = load(ref)
    profile.setdefault("description", "")
    defaults = {**DEFAULTS, **(profile.get("defaults") or {})}
    notes = []
    if o.dataset:
        datasets.parse_ref(o.dataset)
        defaults["primary"] = o.dataset
        notes.append(f"primary dataset {o.dataset} from --dataset")
    elif defaults["primary"] == datasets.PRIMARY:
        defaults["primary"], why = datasets.default_primary()
        notes.append(why)
    for flag, (kinds, param) in SWEEPS.items():
        value = getattr(o, flag)
        if value is None:
            continue
        for b in profile["benchmarks"]:
            if b["kind"] in kinds:
                b[param] = list(value)
                if flag == "rates":  # absolute rates switch load to the open loop only
                    b["concurrency"], b["rate_fractions"] = [], []
    for b in profile["benchmarks"]:
        params = KINDS[b["kind"]][1]
        if o.repetitions is not None and "repetitions" in params:
            b["repetitions"] = o.repetitions
        if o.warmup is not None and "warmup" in params:
            b["warmup"] = o.warmup if o.warmup == "all" else int(o.warmup)
    if o.timeout_s is not None:
        defaults["timeout_s"] = o.timeout_s
    for spec in profile["workloads"].values():
        if o.num_items is not None:
            spec["num_items"] = o.num_items
            spec["sampling"] = spec.get("sampling") if spec.get("sampling") not in (None, "all") else "first"
        if o.duration_range is not None:
            spec["duration_range"] = list(o.duration_range)
        if o.seed is not None:
            spec["seed"] = o.seed
    if o.seed is not None:
        defaults["seed"] = o.seed
    profile["defaults"] = defaults
    for assignment in o.sets:
        _apply_set(profile, assignment)
    defaults = profile["defaults"]
    check(profile, ref)
    primary = str(defaults["primary"])
    for spec in profile["workloads"].values():
        if isinstance(spec.get("dataset"), str):
            spec["dataset"] = spec["dataset"].replace("${primary_slug}", datasets.slug(primary)) \
                .replace("${primary}", primary)
    profile["benchmarks"] = [
        {**{k: b[k] for k in BENCH_KEYS}, **copy.deepcopy(KINDS[b["kind"]][1]), **_kind_timeout(b["kind"], defaults), **b}
        for b in _select(profile["benchmarks"], o.only, o.skip)]
    used = {b["workload"] for b in profile["benchmarks"]}
    profile["workloads"] = {k: v for k, v in profile["workloads"].items() if k in used}
    profile["notes"] = notes
    return profile


def _kind_timeout(kind: str, defaults: dict[str, Any]) -> dict[str, Any]:
    return {"timeout_s": float(defaults["timeout_s"])} if "timeout_s" in KINDS[kind][1] else {}


def workload_hash(profile: dict[str, Any], workload_ids: dict[str, str]) -> str:
    """Same hash = same inputs, same sizes, same seed: the precondition of a compare."""
    payload = {"benchmarks": profile["benchmarks"], "seed": profile["defaults"]["seed"],
               "workloads": dict(sorted(workload_ids.items()))}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
