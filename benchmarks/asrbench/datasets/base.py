"""What a prepared dataset is, and the contract every dataset adapter implements.

Storage layout of a prepared dataset:

    $ASRBENCH_DATA_DIR/<name>/<subset>/
        dataset.json      card: sources, revision, checksums, licence, duration statistics,
                          manifest hash, suite version
        manifest.jsonl    {id, audio, duration, sample_rate, text, speaker, group}
        audio/            only when the adapter writes audio (derived long-form, Earnings-21)

`audio` is absolute for corpora indexed in place and relative to the subset directory for
audio the adapter wrote. The card's `revision` identifies the content: a workload selected
from the dataset hashes it, so an edited corpus changes every workload id built on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from benchmarks.asrbench import SUITE_VERSION
from benchmarks.asrbench.paths import data_root

if TYPE_CHECKING:
    import numpy as np

from benchmarks.asrbench.errors import DatasetError as DatasetError
from benchmarks.asrbench.errors import DatasetUnavailable as DatasetUnavailable

logger = logging.getLogger(__name__)

CARD = "dataset.json"
MANIFEST = "manifest.jsonl"




@dataclass(frozen=True)
class Item:
    id: str
    audio: str
    duration: float
    sample_rate: int
    text: str | None = None
    speaker: str | None = None
    group: str | None = None


@dataclass
class Dataset:
    name: str
    subset: str
    root: Path
    card: dict[str, Any]
    items: list[Item]
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def ref(self) -> str:
        return f"{self.name}/{self.subset}"

    @property
    def revision(self) -> str:
        return str(self.card["revision"])

    @property
    def simulated(self) -> bool:
        return bool(self.card.get("simulated"))

    def path(self, item: Item) -> Path:
        p = Path(item.audio)
        return p if p.is_absolute() else self.root / p

    def audio(self, item: Item) -> np.ndarray:
        """The item's whole file, decoded to float32 mono at 16 kHz (cached)."""
        if item.audio not in self._cache:
            from benchmarks.asrbench import audio as audio_io

            self._cache[item.audio] = audio_io.decode_file(self.path(item))
        return self._cache[item.audio]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def probe(path: Path) -> tuple[float, int]:
    """(duration s, sample rate) from the file's header, without decoding the audio."""
    import soundfile as sf

    try:
        info = sf.info(str(path))
        return float(info.duration), int(info.samplerate)
    except (sf.LibsndfileError, RuntimeError):
        pass
    import av

    try:
        with av.open(str(path)) as container:
            stream = container.streams.audio[0]
            if stream.duration is not None and stream.time_base is not None:
                return float(stream.duration * stream.time_base), int(stream.rate)
            return float(container.duration or 0) / 1e6, int(stream.rate)
    except (av.FFmpegError, IndexError) as exc:
        raise DatasetError(f"{path}: not a readable audio file ({exc})") from exc


def content_revision(items: list[Item]) -> str:
    """Hash of what the items are (id, duration, text, group), not of where they are stored."""
    payload = json.dumps([[i.id, round(i.duration, 3), i.text, i.group] for i in items], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def write_prepared(name: str, subset: str, items: list[Item], card: dict[str, Any],
                   revision: str | None = None) -> Dataset:
    """Write manifest.jsonl and dataset.json for `name/subset`; returns the loaded dataset."""
    if not items:
        raise DatasetError(f"{name}/{subset}: no usable items")
    root = data_root() / name / subset
    root.mkdir(parents=True, exist_ok=True)
    manifest = "".join(json.dumps(asdict(i), sort_keys=True) + "\n" for i in items)
    durations = [i.duration for i in items]
    full = {
        "name": name, "subset": subset, "suite_version": SUITE_VERSION,
        "prepared_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "revision": revision or content_revision(items),
        "manifest_sha256": hashlib.sha256(manifest.encode()).hexdigest(),
        "items": len(items), "with_text": sum(1 for i in items if i.text),
        "duration_s": {"total": round(sum(durations), 3), "min": round(min(durations), 3),
                       "max": round(max(durations), 3), "mean": round(statistics.mean(durations), 3)},
        **card,
    }
    _atomic_write(root / MANIFEST, manifest)
    _atomic_write(root / CARD, json.dumps(full, indent=1, sort_keys=True))
    logger.info("prepared %s/%s: %d items, %.1f s, revision %s", name, subset, len(items),
                full["duration_s"]["total"], full["revision"][:12])
    return Dataset(name=name, subset=subset, root=root, card=full, items=items)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def read_prepared(name: str, subset: str) -> Dataset | None:
    root = data_root() / name / subset
    if not (root / CARD).is_file() or not (root / MANIFEST).is_file():
        return None
    card = json.loads((root / CARD).read_text())
    items = [Item(**json.loads(line)) for line in (root / MANIFEST).read_text().splitlines() if line.strip()]
    return Dataset(name=name, subset=subset, root=root, card=card, items=items)


def prepared_subsets(name: str) -> list[str]:
    root = data_root() / name
    return sorted(p.parent.name for p in root.glob(f"*/{CARD}")) if root.is_dir() else []


class DatasetAdapter(ABC):
    """One corpus: how to find or fetch it, and how to index it into `name/subset`.

    `prepare()` must raise DatasetUnavailable, never download, unless `download=True`.
    """

    name: ClassVar[str]
    license: ClassVar[str]
    acquisition_summary: ClassVar[str]
    size: ClassVar[str]
    durations: ClassVar[str]
    role: ClassVar[str]
    subsets: ClassVar[tuple[str, ...]] = ()
    """Known subsets; empty when the subset is chosen at preparation time."""
    default_subset: ClassVar[str]
    options: ClassVar[dict[str, str]] = {}
    """`-o KEY=VALUE` options of prepare, with their meaning."""

    @abstractmethod
    def prepare(self, subset: str | None, source_dir: Path | None, download: bool,
                options: dict[str, Any]) -> list[Dataset]:
        """Index (or fetch, then index) the corpus; returns what write_prepared(...) wrote
        (several subsets when `subset` is None and the source holds several)."""

    @abstractmethod
    def acquisition(self, subset: str) -> str:
        """How a user gets the corpus onto this machine (shown when it is absent)."""

    def check_options(self, options: dict[str, Any]) -> None:
        unknown = set(options) - set(self.options)
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise DatasetError(f"prepare {self.name}: unknown option(s) {sorted(unknown)}; known: {known}")

    def resolve_subset(self, subset: str | None) -> str:
        chosen = subset or self.default_subset
        if self.subsets and chosen not in self.subsets:
            raise DatasetError(f"{self.name} has no subset {chosen!r}; known: {', '.join(self.subsets)}")
        return chosen
