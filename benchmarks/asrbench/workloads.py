"""Workloads: a seeded specification resolved against a prepared dataset into an explicit,
ordered list of items. Each item is a span of one audio file (a crop is an offset and a length).

Determinism: every random choice draws from `random.Random(f"{seed}:{purpose}")`; CPython
seeds string inputs through SHA-512, so selection does not depend on PYTHONHASHSEED.
Identity: the workload id hashes what was selected (the dataset revision plus each item's
id, offset and duration, in order), not where the files are stored.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.asrbench.audio import SAMPLE_RATE
from benchmarks.asrbench.datasets import Dataset, Item
from benchmarks.asrbench.errors import WorkloadError as WorkloadError

SPEC_FIELDS = {"dataset", "sampling", "num_items", "duration_range", "buckets", "crop_s", "order", "require_text",
               "seed", "manifest"}
SAMPLINGS = ("stratified", "random", "first", "all")
ORDERS = ("shuffled", "manifest", "duration_asc", "duration_desc")
DEFAULT_BUCKETS: dict[str, list[float | None]] = {
    "very_short": [0.0, 2.0], "short": [2.0, 5.0], "typical": [5.0, 15.0], "medium": [15.0, 30.0],
    "long": [30.0, 120.0], "longform": [120.0, None],
}
"""[low, high) seconds; the 30 s boundary is Whisper's input window."""




@dataclass(frozen=True)
class WorkItem:
    item: Item
    offset: float
    duration: float
    bucket: str
    cropped: bool = False

    @property
    def uid(self) -> str:
        return f"{self.item.id}@{self.offset:g}" if self.cropped else self.item.id

    @property
    def text(self) -> str | None:
        """Crops carry no transcript."""
        return None if self.cropped else self.item.text


@dataclass
class Workload:
    name: str
    dataset: Dataset
    items: list[WorkItem]
    spec: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        payload = json.dumps([self.dataset.revision, [[w.item.id, round(w.offset, 4), round(w.duration, 4)]
                                                      for w in self.items]])
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def audio(self, w: WorkItem) -> np.ndarray:
        whole = self.dataset.audio(w.item)
        if not w.cropped:
            return whole
        start = round(w.offset * SAMPLE_RATE)
        return whole[start:start + round(w.duration * SAMPLE_RATE)]

    def describe(self) -> dict[str, Any]:
        """What run.json and workloads/<name>.json record: the spec and every item."""
        return {"name": self.name, "id": self.id, "dataset": self.dataset.ref, "revision": self.dataset.revision,
                "spec": self.spec, "notes": self.notes,
                "items": [{"id": w.uid, "item": w.item.id, "offset": w.offset, "duration": w.duration,
                           "bucket": w.bucket, "text": w.text} for w in self.items]}


def bucket_of(duration: float, buckets: dict[str, list[float | None]]) -> str:
    for name, (low, high) in buckets.items():
        if duration >= (low or 0.0) and (high is None or duration < high):
            return name
    return "other"


def check_spec(name: str, spec: dict[str, Any]) -> None:
    unknown = set(spec) - SPEC_FIELDS
    if unknown:
        raise WorkloadError(f"workload {name}: unknown field(s) {sorted(unknown)}; known: {sorted(SPEC_FIELDS)}")
    if "dataset" not in spec and "manifest" not in spec:
        raise WorkloadError(f"workload {name}: needs a dataset")
    if spec.get("sampling", "all") not in SAMPLINGS:
        raise WorkloadError(f"workload {name}: sampling must be one of {SAMPLINGS}")
    if spec.get("order", "manifest") not in ORDERS:
        raise WorkloadError(f"workload {name}: order must be one of {ORDERS}")


def _candidates(ds: Dataset, spec: dict[str, Any], buckets: dict[str, list[float | None]],
                rng: random.Random) -> list[WorkItem]:
    low, high = spec.get("duration_range") or (None, None)
    items = [i for i in ds.items if not spec.get("require_text") or i.text]
    items = [i for i in items if (low is None or i.duration >= low) and (high is None or i.duration < high)]
    crops = spec.get("crop_s")
    if not crops:
        return [WorkItem(i, 0.0, i.duration, bucket_of(i.duration, buckets)) for i in items]
    out = []
    for length in sorted(float(c) for c in crops):
        for i in items:
            for _ in range(int(i.duration // length)):
                offset = round(rng.uniform(0.0, i.duration - length), 3)
                out.append(WorkItem(i, offset, length, bucket_of(length, buckets), cropped=True))
    return out


def _stratified(pool: list[WorkItem], n: int, rng: random.Random, notes: list[str]) -> list[WorkItem]:
    """An equal share per bucket; a bucket's shortfall is redistributed to the others and noted."""
    by_bucket: dict[str, list[WorkItem]] = {}
    for w in pool:
        by_bucket.setdefault(w.bucket, []).append(w)
    for members in by_bucket.values():
        rng.shuffle(members)
    chosen: list[WorkItem] = []
    remaining = dict(by_bucket)
    while len(chosen) < n and remaining:
        share = max(1, (n - len(chosen)) // len(remaining))
        for name in sorted(remaining):
            take = remaining[name][:share]
            chosen += take[: n - len(chosen)]
            remaining[name] = remaining[name][len(take):]
        remaining = {k: v for k, v in remaining.items() if v}
    counts = {b: sum(1 for w in chosen if w.bucket == b) for b in sorted(by_bucket)}
    if len(set(counts.values())) > 1:
        notes.append(f"stratified shares were uneven (a bucket ran short): {counts}")
    return chosen


def _pinned(name: str, spec: dict[str, Any], ds: Dataset, buckets: dict[str, list[float | None]]) -> Workload:
    """A previously saved workload file (workloads/<name>.json of a run) pins the exact inputs."""
    from pathlib import Path

    try:
        saved = json.loads(Path(spec["manifest"]).read_text())
        by_id = {i.id: i for i in ds.items}
        items = [WorkItem(by_id[e["item"]], float(e["offset"]), float(e["duration"]),
                          bucket_of(float(e["duration"]), buckets), cropped=e["id"] != e["item"])
                 for e in saved["items"]]
    except (OSError, ValueError, KeyError) as exc:
        raise WorkloadError(f"workload {name}: cannot use saved workload {spec['manifest']}: {exc!r}") from exc
    return Workload(name=name, dataset=ds, items=items, spec=spec, notes=[f"pinned by {spec['manifest']}"])


def resolve(name: str, spec: dict[str, Any], ds: Dataset, seed: int) -> Workload:
    check_spec(name, spec)
    seed = int(spec.get("seed", seed))
    buckets = spec.get("buckets") or DEFAULT_BUCKETS

    def rng(purpose: str) -> random.Random:
        return random.Random(f"{seed}:{name}:{purpose}")

    notes: list[str] = []
    if spec.get("manifest"):
        return _pinned(name, spec, ds, buckets)
    pool = _candidates(ds, spec, buckets, rng("crop"))
    if not pool:
        raise WorkloadError(f"workload {name}: no item of {ds.ref} matches {spec}")
    n = spec.get("num_items")
    n = len(pool) if n is None else int(n)
    sampling = spec.get("sampling", "all")
    if sampling == "all":
        chosen = pool
    elif sampling == "first":
        chosen = pool[:n]
    elif sampling == "random":
        chosen = rng("sampling").sample(pool, min(n, len(pool)))
    else:
        chosen = _stratified(list(pool), n, rng("sampling"), notes)
    if len(chosen) < n and sampling != "all":
        notes.append(f"asked for {n} items, {ds.ref} had {len(chosen)} matching")
    order = spec.get("order", "manifest")
    if order == "shuffled":
        rng("order").shuffle(chosen)
    elif order == "manifest":
        position = {i.id: k for k, i in enumerate(ds.items)}
        chosen.sort(key=lambda w: (position[w.item.id], w.offset))
    else:
        chosen.sort(key=lambda w: w.duration, reverse=order == "duration_desc")
    return Workload(name=name, dataset=ds, items=chosen, spec=spec, notes=notes)
