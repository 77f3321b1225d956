"""The dataset registry. A dataset is referenced as `name/subset` (e.g. `librispeech/test-clean`).

| name        | licence      | acquisition                                   |
|-------------|--------------|-----------------------------------------------|
| librispeech | CC BY 4.0    | indexed in place, or --download (MD5, mirrors) |
| ljspeech    | public domain| indexed in place ($LJSPEECH_DIR, ...)          |
| earnings21  | CC BY-SA 4.0 | local Parquet, or --download (SHA-256)         |
| longform    | the source's | derived from a prepared dataset                |
| manifest    | as supplied  | your JSONL manifest, indexed in place          |
| synthetic   | n/a          | generated (tests of the suite only)            |

Nothing is downloaded unless `prepare ... --download` asks for it.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from benchmarks.asrbench.datasets.base import (
    Dataset,
    DatasetAdapter,
    DatasetError,
    DatasetUnavailable,
    Item,
    prepared_subsets,
    probe,
    read_prepared,
)
from benchmarks.asrbench.datasets.derived import (
    DEFAULT_TARGETS_S,
    UNGROUPED_GAP_S,
    Longform,
    Synthetic,
    runs_of,
    slug,
)
from benchmarks.asrbench.datasets.earnings21 import Earnings21
from benchmarks.asrbench.datasets.librispeech import LibriSpeech
from benchmarks.asrbench.datasets.ljspeech import LJSpeech
from benchmarks.asrbench.datasets.manifest import Manifest, default_subset_name
from benchmarks.asrbench.paths import DEV_MANIFEST

__all__ = ["DATASETS", "Dataset", "DatasetAdapter", "DatasetError", "DatasetUnavailable", "Item", "default_primary",
           "ensure", "load", "parse_ref", "prepare", "registry", "slug", "verify"]

logger = logging.getLogger(__name__)

DATASETS: dict[str, type[DatasetAdapter]] = {
    a.name: a for a in (LibriSpeech, LJSpeech, Earnings21, Longform, Manifest, Synthetic)}
PRIMARY = "librispeech/test-clean"
DEV_SET = f"manifest/{default_subset_name(DEV_MANIFEST)}"
"""Our dev speech set (../shared/data/speech): prepared on first use."""


def adapter(name: str) -> DatasetAdapter:
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]()


def parse_ref(ref: str) -> tuple[str, str]:
    name, sep, subset = ref.partition("/")
    if not sep or not subset:
        raise DatasetError(f"dataset reference {ref!r} is not NAME/SUBSET (e.g. librispeech/test-clean)")
    adapter(name)
    return name, subset


def prepare(name: str, subset: str | None = None, source_dir: Path | None = None, download: bool = False,
            options: dict[str, Any] | None = None) -> list[Dataset]:
    return adapter(name).prepare(subset, source_dir, download, dict(options or {}))


def load(ref: str) -> Dataset:
    name, subset = parse_ref(ref)
    ds = read_prepared(name, subset)
    if ds is None:
        raise DatasetUnavailable(f"dataset {ref} is not prepared.\n" + adapter(name).acquisition(subset))
    return ds


def ensure(ref: str) -> Dataset:
    """Load `ref`, preparing it first when the suite can do so without a user's input: the
    dev speech set, synthetic clips, and long-form recordings derived from those."""
    name, subset = parse_ref(ref)
    ds = read_prepared(name, subset)
    if ds is not None:
        return ds
    if ref == DEV_SET and DEV_MANIFEST.is_file():
        return Manifest().prepare(subset, DEV_MANIFEST, False, {})[0]
    if name == "synthetic":
        return Synthetic().prepare(subset, None, False, {})[0]
    if name == "longform":
        source = next((s for s in _slug_sources() if slug(s) == subset), None)
        if source is not None:
            return Longform().prepare(subset, None, False, {"source": source, "targets": _auto_targets(ensure(source))})[0]
    return load(ref)


def _auto_targets(source: Dataset) -> list[float]:
    """The default targets the source's longest run of contiguous speech can fill; a smaller
    corpus gets one target of that run's length."""
    runs, contiguous = runs_of(source.items)
    gap = 0.0 if contiguous else UNGROUPED_GAP_S
    longest = max(sum(i.duration for i in run) + gap * (len(run) - 1) for run in runs)
    return [t for t in DEFAULT_TARGETS_S if t <= longest] or [float(math.ceil(longest))]


def _slug_sources() -> list[str]:
    refs = [DEV_SET, "synthetic/default"]
    for name in DATASETS:
        if name != "longform":
            refs += [f"{name}/{s}" for s in prepared_subsets(name)]
    return refs


def default_primary() -> tuple[str, str]:
    """(dataset, why): LibriSpeech test-clean when prepared, else our dev speech set."""
    if read_prepared("librispeech", "test-clean") is not None:
        return PRIMARY, "librispeech/test-clean is prepared"
    return DEV_SET, (f"no LibriSpeech copy is prepared; using the dev speech set {DEV_SET} ({DEV_MANIFEST}) "
                     "as the primary dataset")


def verify(ds: Dataset) -> list[str]:
    """`prepare --verify`: re-read every file's header; returns the disagreements."""
    problems = []
    for item in ds.items:
        path = ds.path(item)
        if not path.is_file():
            problems.append(f"{item.id}: {path} is missing")
            continue
        duration, _rate = probe(path)
        if abs(duration - item.duration) > 0.01:
            problems.append(f"{item.id}: header says {duration:.3f} s, manifest {item.duration:.3f} s")
    return problems


def registry() -> list[dict[str, Any]]:
    rows = []
    for name, cls in DATASETS.items():
        rows.append({"name": name, "subsets": ", ".join(cls.subsets) or "(chosen at prepare)",
                     "prepared": ", ".join(prepared_subsets(name)) or "-", "licence": cls.license,
                     "acquisition": cls.acquisition_summary, "size": cls.size, "durations": cls.durations,
                     "role": cls.role})
    return rows
