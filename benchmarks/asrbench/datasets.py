"""Prepared datasets: content-addressed sets of 16 kHz mono WAV clips with reference text.

Three ways to prepare one:
  manifest   index any `{id, audio, text}` JSONL (audio relative to the manifest's folder)
  synthetic  deterministic tone-and-noise clips for the suite's own tests (no speech)
  longform   consecutive clips of a prepared set joined up to target lengths, exact transcripts

A prepared set lives in `<data_root>/<name>/index.json` + `audio/*.wav`. Its `id` is the
sha256 of its items' audio hashes and texts, so two runs on the same id ran the same audio.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.asrbench import audio as audio_io
from benchmarks.asrbench.paths import DEFAULT_MANIFEST, data_root

logger = logging.getLogger(__name__)

SKIP_FLAGS = frozenset({"no_reference", "per_channel_reference", "overlapping_speech"})
"""Manifest flags whose single `text` is not a usable reference for the mono mix-down."""
LONGFORM_GAP_S = 0.5
"""Silence between joined clips (seconds), so utterance boundaries stay audible."""
SYNTHETIC_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


class DatasetError(ValueError):
    """A dataset is missing, malformed, or cannot be prepared."""


@dataclass(frozen=True)
class Item:
    id: str
    path: str
    """WAV path relative to the dataset folder."""
    text: str
    duration_s: float
    sha256: str


@dataclass
class Dataset:
    name: str
    kind: str
    id: str
    root: Path
    items: list[Item]
    source: dict[str, Any] = field(default_factory=dict)
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def audio(self, item: Item) -> np.ndarray:
        if item.id not in self._cache:
            self._cache[item.id] = audio_io.read_wav(self.root / item.path)
        return self._cache[item.id]

    def wav_path(self, item: Item) -> Path:
        return self.root / item.path

    @property
    def total_duration_s(self) -> float:
        return sum(i.duration_s for i in self.items)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dataset_id(kind: str, items: list[Item], params: dict[str, Any]) -> str:
    payload = json.dumps({"kind": kind, "params": params, "items": [[i.sha256, i.text] for i in items]},
                         sort_keys=True)
    return _sha256(payload.encode())


def _store_clip(root: Path, item_id: str, text: str, samples: np.ndarray) -> Item:
    data = audio_io.to_wav_bytes(samples)
    sha = _sha256(data)
    rel = f"audio/{sha[:20]}.wav"
    target = root / rel
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    return Item(id=item_id, path=rel, text=text, duration_s=round(len(samples) / audio_io.SAMPLE_RATE, 4),
                sha256=sha)


def _write_index(ds: Dataset) -> Dataset:
    ds.root.mkdir(parents=True, exist_ok=True)
    index = {"name": ds.name, "kind": ds.kind, "id": ds.id, "source": ds.source,
             "items": [asdict(i) for i in ds.items]}
    tmp = ds.root / "index.json.tmp"
    tmp.write_text(json.dumps(index, indent=1))
    tmp.replace(ds.root / "index.json")
    logger.info("prepared %s (%s): %d items, %.1f s, id %s", ds.name, ds.kind, len(ds.items),
                ds.total_duration_s, ds.id[:12])
    return ds


def prepare_manifest(manifest: Path, name: str = "speech") -> Dataset:
    """Index a `{id, audio, text}` JSONL; audio paths are relative to the manifest's folder."""
    if not manifest.is_file():
        raise DatasetError(f"manifest {manifest} does not exist")
    root = data_root() / name
    items: list[Item] = []
    skipped: dict[str, str] = {}
    for lineno, line in enumerate(manifest.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            item_id, rel_audio = str(entry["id"]), str(entry["audio"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DatasetError(f"{manifest}:{lineno}: expected a JSON object with id, audio, text ({exc})") from exc
        text = entry.get("text")
        flags = SKIP_FLAGS.intersection(entry.get("flags") or [])
        if not text or not str(text).strip():
            skipped[item_id] = "no reference text"
            continue
        if flags:
            skipped[item_id] = f"flags {sorted(flags)}"
            continue
        samples = audio_io.decode_file(manifest.parent / rel_audio)
        items.append(_store_clip(root, item_id, str(text).strip(), samples))
    if not items:
        raise DatasetError(f"{manifest}: no usable items (skipped: {skipped})")
    source = {"manifest": str(manifest.resolve()), "manifest_sha256": _sha256(manifest.read_bytes()),
              "skipped": skipped}
    ds = Dataset(name=name, kind="manifest", id=_dataset_id("manifest", items, {}), root=root, items=items,
                 source=source)
    return _write_index(ds)


def prepare_synthetic(name: str = "synthetic", count: int = 6, seed: int = 0) -> Dataset:
    """Deterministic clips of 1-3.5 s: chirped tones under a syllable-rate envelope plus noise.

    The audio carries no speech; the texts are deterministic word sequences so the mock
    backend (and WER plumbing) have a reference. Same (count, seed) gives the same id.
    """
    if count < 1:
        raise DatasetError("synthetic count must be >= 1")
    rng = np.random.default_rng(seed)
    root = data_root() / name
    items = []
    for i in range(count):
        duration = 1.0 + 0.5 * (i % 6)
        t = np.arange(int(duration * audio_io.SAMPLE_RATE)) / audio_io.SAMPLE_RATE
        f0 = 120.0 + 40.0 * rng.random()
        envelope = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))  # 4 Hz: roughly a syllable rate
        tone = np.sin(2 * np.pi * (f0 * t + 30.0 * t**2)) + 0.5 * np.sin(2 * np.pi * 3 * f0 * t)
        samples = (0.3 * envelope * tone + 0.01 * rng.standard_normal(t.size)).astype(np.float32)
        words = [SYNTHETIC_WORDS[int(k)] for k in rng.integers(0, len(SYNTHETIC_WORDS), size=int(2 * duration))]
        items.append(_store_clip(root, f"syn_{i:03d}", " ".join(words), samples))
    params = {"count": count, "seed": seed}
    ds = Dataset(name=name, kind="synthetic", id=_dataset_id("synthetic", items, params), root=root,
                 items=items, source=params)
    return _write_index(ds)


def prepare_longform(source_name: str, targets_s: list[float], name: str | None = None) -> Dataset:
    """Join clips of `source_name` in dataset order up to each target length, exact transcripts.

    Clips are taken consecutively (wrapping around); one that would push the piece past the
    target is passed over, so every piece is at most its target (a single clip longer than
    the target is used alone). The piece ends when no clip fits the remaining room.
    """
    source = load(source_name)
    name = name or f"longform-{source_name}"
    root = data_root() / name
    gap = np.zeros(int(LONGFORM_GAP_S * audio_io.SAMPLE_RATE), dtype=np.float32)
    items = []
    pieces_of: dict[str, list[str]] = {}
    for target in sorted(targets_s):
        if target <= 0:
            raise DatasetError(f"longform target must be > 0, got {target}")
        chosen = _pick_clips(source.items, target)
        pieces_of[f"long_{int(target)}s"] = [c.id for c in chosen]
        pieces: list[np.ndarray] = []
        for k, clip in enumerate(chosen):
            if k:
                pieces.append(gap)
            pieces.append(source.audio(clip))
        items.append(_store_clip(root, f"long_{int(target)}s", " ".join(c.text for c in chosen),
                                 np.concatenate(pieces)))
    params = {"source": source.id, "targets_s": sorted(targets_s), "gap_s": LONGFORM_GAP_S}
    ds = Dataset(name=name, kind="longform", id=_dataset_id("longform", items, params), root=root,
                 items=items, source={"source_name": source_name, "pieces": pieces_of, **params})
    return _write_index(ds)


def _pick_clips(clips: list[Item], target: float) -> list[Item]:
    chosen: list[Item] = []
    total = 0.0
    k = 0
    misses = 0
    while misses < len(clips):
        clip = clips[k % len(clips)]
        k += 1
        extra = clip.duration_s + (LONGFORM_GAP_S if chosen else 0.0)
        if total + extra <= target:
            chosen.append(clip)
            total += extra
            misses = 0
        else:
            misses += 1
    return chosen or clips[:1]


def load(name: str) -> Dataset:
    index_path = data_root() / name / "index.json"
    if not index_path.is_file():
        raise DatasetError(f"dataset {name!r} is not prepared (no {index_path}); run `prepare` first")
    index = json.loads(index_path.read_text())
    items = [Item(**i) for i in index["items"]]
    return Dataset(name=index["name"], kind=index["kind"], id=index["id"], root=index_path.parent,
                   items=items, source=index.get("source", {}))


# Named sets a profile may use; prepared on first use (deterministic, so preparing is idempotent).
RECIPES: dict[str, Callable[[], Dataset]] = {
    "speech": lambda: prepare_manifest(DEFAULT_MANIFEST, "speech"),
    "synthetic": lambda: prepare_synthetic("synthetic"),
    "longform-speech": lambda: prepare_longform("speech", [30.0, 60.0, 120.0]),
    "longform-speech-short": lambda: prepare_longform("speech", [30.0], name="longform-speech-short"),
    "longform-synthetic": lambda: prepare_longform("synthetic", [5.0, 9.0]),
}
RECIPE_DEPENDS = {"longform-speech": "speech", "longform-speech-short": "speech", "longform-synthetic": "synthetic"}


def ensure(name: str) -> Dataset:
    """Load `name`, preparing it from its recipe when it is a known set that is not prepared yet."""
    try:
        return load(name)
    except DatasetError:
        if name not in RECIPES:
            raise
    if name in RECIPE_DEPENDS:
        ensure(RECIPE_DEPENDS[name])
    return RECIPES[name]()


def list_prepared() -> list[dict[str, Any]]:
    root = data_root()
    out = []
    for index_path in sorted(root.glob("*/index.json")) if root.is_dir() else []:
        index = json.loads(index_path.read_text())
        out.append({"name": index["name"], "kind": index["kind"], "id": index["id"],
                    "items": len(index["items"]),
                    "duration_s": round(sum(i["duration_s"] for i in index["items"]), 2)})
    return out
