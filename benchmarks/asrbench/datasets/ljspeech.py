"""LJSpeech 1.1 (public domain): indexed in place from a local copy; nothing is downloaded.

    LJSpeech-1.1/metadata.csv     "ID|transcript|normalized transcript" lines
    LJSpeech-1.1/wavs/<ID>.wav    22,050 Hz mono

The copy is found through `--source-dir`, else `$LJSPEECH_DIR`, `$AUDIO_DIR`, `$WAV_DIR`
(each may name the corpus root or its `wavs/` folder). Items are grouped by book
(`LJ001` of `LJ001-0001`): consecutive clips of one book are contiguous reading.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from benchmarks.asrbench.datasets.base import (
    Dataset,
    DatasetAdapter,
    DatasetError,
    DatasetUnavailable,
    Item,
    probe,
    write_prepared,
)
from benchmarks.asrbench.paths import env_path

DISCOVERY_ENV = ("LJSPEECH_DIR", "AUDIO_DIR", "WAV_DIR")


def corpus_root(candidate: Path) -> Path | None:
    for root in (candidate, candidate.parent, candidate / "LJSpeech-1.1"):
        if (root / "metadata.csv").is_file() and (root / "wavs").is_dir():
            return root
    return None


class LJSpeech(DatasetAdapter):
    name = "ljspeech"
    license = "public domain"
    acquisition_summary = "indexed in place from a local copy ($LJSPEECH_DIR, $AUDIO_DIR, $WAV_DIR or --source-dir)"
    size = "13,100 clips, 24 h (2.6 GB)"
    durations = "1.1-10 s"
    role = "zero-download smoke source; short-utterance latency"
    subsets = ("all",)
    default_subset = "all"

    def acquisition(self, subset: str) -> str:
        return ("no local LJSpeech copy found (looked at --source-dir, then $" + ", $".join(DISCOVERY_ENV) + ").\n"
                "  point one of them at the corpus (the folder holding metadata.csv and wavs/):\n"
                "    LJSPEECH_DIR=/data/LJSpeech-1.1 python -m benchmarks.asrbench prepare ljspeech\n"
                "  the corpus is public domain: https://keithito.com/LJ-Speech-Dataset/ (2.6 GB); "
                "asrbench does not download it")

    def prepare(self, subset: str | None, source_dir: Path | None, download_ok: bool,
                options: dict[str, Any]) -> list[Dataset]:
        self.check_options(options)
        chosen = self.resolve_subset(subset)
        candidates = [source_dir] if source_dir is not None else [env_path(v) for v in DISCOVERY_ENV]
        root = next((r for c in candidates if c is not None for r in [corpus_root(c)] if r), None)
        if root is None:
            if source_dir is not None:
                raise DatasetError(f"{source_dir}: no LJSpeech copy (expected metadata.csv and wavs/)")
            raise DatasetUnavailable(self.acquisition(chosen))
        items = []
        with (root / "metadata.csv").open(newline="", encoding="utf-8") as f:
            for row in csv.reader(f, delimiter="|", quoting=csv.QUOTE_NONE):
                if not row:
                    continue
                if len(row) < 2:
                    raise DatasetError(f"{root / 'metadata.csv'}: malformed line {row!r}")
                wav = root / "wavs" / f"{row[0]}.wav"
                if not wav.is_file():
                    raise DatasetError(f"{wav} is listed in metadata.csv but missing")
                duration, rate = probe(wav)
                text = row[2] if len(row) > 2 and row[2].strip() else row[1]
                items.append(Item(id=row[0], audio=str(wav.resolve()), duration=round(duration, 4), sample_rate=rate,
                                  text=text.strip(), speaker="LJ", group=row[0].split("-")[0]))
        return [write_prepared(self.name, chosen, items, {"license": self.license,
                                                          "source": {"corpus_dir": str(root.resolve())}})]
