"""Datasets the suite builds itself: long-form recordings from a prepared dataset, and
synthetic clips for testing the suite (flagged simulated; never a measurement input)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from benchmarks.asrbench.datasets.base import (
    Dataset,
    DatasetAdapter,
    DatasetError,
    DatasetUnavailable,
    Item,
    write_prepared,
)
from benchmarks.asrbench.paths import data_root

DEFAULT_TARGETS_S = (60.0, 300.0, 900.0)
MIN_FILL = 0.8
"""A long-form piece must reach this fraction of its target length to be kept."""
UNGROUPED_GAP_S = 0.5
"""Silence between clips not known to be contiguous (a manifest without groups)."""
SYNTHETIC_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


def slug(ref: str) -> str:
    return ref.replace("/", "-")


def runs_of(items: list[Item]) -> tuple[list[list[Item]], bool]:
    """Runs of contiguous text-bearing speech: each group's items in order; an ungrouped corpus
    is one run (not known to be contiguous: the second value is False)."""
    items = [i for i in items if i.text]
    if all(i.group is None for i in items):
        return [items], False
    runs: dict[str, list[Item]] = {}
    for i in items:
        runs.setdefault(i.group or i.id, []).append(i)
    return list(runs.values()), True


def _pieces(run: list[Item], target: float, gap: float) -> list[list[Item]]:
    """Consecutive items packed up to `target` seconds, never cropping an utterance."""
    pieces, current, length = [], [], 0.0
    for item in run:
        extra = item.duration + (gap if current else 0.0)
        if current and length + extra > target:
            pieces.append(current)
            current, length, extra = [], 0.0, item.duration
        current.append(item)
        length += extra
    if current:
        pieces.append(current)
    return [p for p in pieces if sum(i.duration for i in p) + gap * (len(p) - 1) >= MIN_FILL * target
            and sum(i.duration for i in p) + gap * (len(p) - 1) <= target]


class Longform(DatasetAdapter):
    name = "longform"
    license = "inherits the source"
    acquisition_summary = "built from a prepared dataset (--source NAME/SUBSET --targets 60,300,900)"
    size = "derived"
    durations = "configurable targets (default 60, 300, 900 s)"
    role = "long recordings with exact transcripts"
    default_subset = ""
    options: ClassVar[dict[str, str]] = {"max_per_target": "recordings built per target length (default 4)"}

    def acquisition(self, subset: str) -> str:
        return ("longform is derived from a prepared dataset:\n"
                "    python -m benchmarks.asrbench prepare longform --source librispeech/test-clean --targets 60,300,900")

    def prepare(self, subset: str | None, source_dir: Path | None, download_ok: bool,
                options: dict[str, Any]) -> list[Dataset]:
        source_ref = options.pop("source", None)
        targets = [float(t) for t in options.pop("targets", DEFAULT_TARGETS_S)]
        self.check_options(options)
        if not source_ref:
            raise DatasetUnavailable(self.acquisition(subset or ""))
        from benchmarks.asrbench.datasets import ensure

        source = ensure(source_ref)
        return [self.build(source, targets, subset or slug(source.ref), int(options.get("max_per_target", 4)))]

    def build(self, source: Dataset, targets: list[float], subset: str, max_per_target: int) -> Dataset:
        import numpy as np

        from benchmarks.asrbench import audio as audio_io

        out_dir = data_root() / self.name / subset / "audio"
        runs, contiguous = runs_of(source.items)
        gap = 0.0 if contiguous else UNGROUPED_GAP_S
        items, built = [], {}
        for target in sorted(targets):
            if target <= 0:
                raise DatasetError(f"longform target must be > 0, got {target}")
            pieces = [p for run in runs for p in _pieces(run, target, gap)][:max_per_target]
            built[f"{target:g}"] = len(pieces)
            for k, piece in enumerate(pieces):
                item_id = f"long{target:g}s_{k:02d}"
                silence = np.zeros(int(gap * audio_io.SAMPLE_RATE), dtype=np.float32)
                parts = [x for i, clip in enumerate(piece) for x in ([silence] if i else []) + [source.audio(clip)]]
                samples = np.concatenate(parts)
                audio_io.write_flac(out_dir / f"{item_id}.flac", samples)
                items.append(Item(id=item_id, audio=f"audio/{item_id}.flac",
                                  duration=round(len(samples) / audio_io.SAMPLE_RATE, 4),
                                  sample_rate=audio_io.SAMPLE_RATE, text=" ".join(c.text or "" for c in piece),
                                  group=piece[0].group))
        if not items:
            raise DatasetError(f"{source.ref}: no run of text-bearing clips reaches {MIN_FILL:.0%} of any target "
                               f"{targets} s")
        card = {"license": source.card.get("license"), "source": {
            "dataset": source.ref, "revision": source.revision, "targets_s": sorted(targets), "built": built,
            "contiguous": contiguous, "gap_s": gap}}
        return write_prepared(self.name, subset, items, card)


class Synthetic(DatasetAdapter):
    name = "synthetic"
    license = "n/a"
    acquisition_summary = "generated"
    size = "as configured"
    durations = "1-3.5 s"
    role = "tests of the suite itself; flagged simulated, never a measurement input"
    subsets = ("default",)
    default_subset = "default"
    options: ClassVar[dict[str, str]] = {"count": "clips (default 6)", "seed": "generator seed (default 0)"}

    def acquisition(self, subset: str) -> str:
        return "python -m benchmarks.asrbench prepare synthetic"

    def prepare(self, subset: str | None, source_dir: Path | None, download_ok: bool,
                options: dict[str, Any]) -> list[Dataset]:
        self.check_options(options)
        return [self.build(subset or self.default_subset, int(options.get("count", 6)), int(options.get("seed", 0)))]

    def build(self, subset: str, count: int, seed: int) -> Dataset:
        """Chirped tones under a syllable-rate envelope plus noise; deterministic word texts."""
        import numpy as np

        from benchmarks.asrbench import audio as audio_io

        if count < 1:
            raise DatasetError("synthetic count must be >= 1")
        rng = np.random.default_rng(seed)
        out_dir = data_root() / self.name / subset / "audio"
        items = []
        for i in range(count):
            duration = 1.0 + 0.5 * (i % 6)
            t = np.arange(int(duration * audio_io.SAMPLE_RATE)) / audio_io.SAMPLE_RATE
            f0 = 120.0 + 40.0 * rng.random()
            envelope = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))  # 4 Hz: roughly a syllable rate
            tone = np.sin(2 * np.pi * (f0 * t + 30.0 * t**2)) + 0.5 * np.sin(2 * np.pi * 3 * f0 * t)
            samples = (0.3 * envelope * tone + 0.01 * rng.standard_normal(t.size)).astype(np.float32)
            words = [SYNTHETIC_WORDS[int(k)] for k in rng.integers(0, len(SYNTHETIC_WORDS), size=int(2 * duration))]
            audio_io.write_wav(out_dir / f"syn_{i:03d}.wav", samples)
            items.append(Item(id=f"syn_{i:03d}", audio=f"audio/syn_{i:03d}.wav", duration=duration,
                              sample_rate=audio_io.SAMPLE_RATE, text=" ".join(words), group="synthetic"))
        return write_prepared(self.name, subset, items, {"license": self.license, "simulated": True,
                                                         "source": {"count": count, "seed": seed}})
