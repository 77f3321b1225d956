"""LibriSpeech (OpenSLR SLR12, CC BY 4.0): the primary dataset.

Indexed in place from an existing tree (`--source-dir`) or from the archive `--download`
fetched and extracted under the data directory:

    LibriSpeech/<subset>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt   "UTT-ID TRANSCRIPT" lines
    LibriSpeech/<subset>/<speaker>/<chapter>/<UTT-ID>.flac

Each item's group is its chapter (`<speaker>-<chapter>`): consecutive utterances of one
chapter are contiguous speech, which the long-form builder concatenates.
"""

from __future__ import annotations

import logging
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
from benchmarks.asrbench.datasets.download import download, safe_extract
from benchmarks.asrbench.paths import data_root

logger = logging.getLogger(__name__)

MIRRORS = (
    "https://www.openslr.org/resources/12/",
    "https://us.openslr.org/resources/12/",
    "https://openslr.elda.org/resources/12/",
    "https://openslr.magicdatatech.com/resources/12/",
)
ARCHIVE_MD5 = {
    "test-clean": "32fa31d27d2e1cad72775fee3f4849a9",
    "test-other": "fb5a50374b501bb3bac4815ee91d3135",
    "dev-clean": "42e2234ba48799c1f50f24a7926300a1",
    "dev-other": "c8d0bcc9cca99d4f8b62fcc847357931",
}
"""Published by OpenSLR (md5sum.txt of resource 12)."""


def _download_dir() -> Path:
    return data_root() / "librispeech" / "_download"


def find_subset_dir(source_dir: Path, subset: str) -> Path | None:
    """`source_dir` may be the LibriSpeech root, the subset directory, or a folder holding LibriSpeech/."""
    for cand in (source_dir / subset, source_dir / "LibriSpeech" / subset, source_dir):
        if cand.is_dir() and cand.name == subset and any(cand.glob("*/*/*.trans.txt")):
            return cand
    return None


def index_subset(subset_dir: Path) -> list[Item]:
    items = []
    for trans in sorted(subset_dir.glob("*/*/*.trans.txt")):
        speaker, chapter = trans.parent.parent.name, trans.parent.name
        for lineno, line in enumerate(trans.read_text().splitlines(), 1):
            if not line.strip():
                continue
            utt, _, text = line.partition(" ")
            flac = trans.parent / f"{utt}.flac"
            if not flac.is_file() or not text.strip():
                raise DatasetError(f"{trans}:{lineno}: {utt} has no {flac.name} or no transcript")
            duration, rate = probe(flac)
            items.append(Item(id=utt, audio=str(flac.resolve()), duration=round(duration, 4), sample_rate=rate,
                              text=text.strip(), speaker=speaker, group=f"{speaker}-{chapter}"))
    return items


class LibriSpeech(DatasetAdapter):
    name = "librispeech"
    license = "CC BY 4.0"
    acquisition_summary = "346 MB archive (test-clean), MD5-verified, four mirrors; or --source-dir"
    size = "test-clean 346 MB, 2,620 utterances, 5.4 h"
    durations = "1.3-35 s, mean ≈ 7.4 s"
    role = "primary: duration buckets, load, streaming, long-form source, WER guardrail"
    subsets = tuple(ARCHIVE_MD5)
    default_subset = "test-clean"

    def acquisition(self, subset: str) -> str:
        return (f"LibriSpeech {subset} is not prepared and no copy was found.\n"
                f"  download it (346 MB for test-clean, MD5-verified):\n"
                f"    python -m benchmarks.asrbench prepare librispeech --subset {subset} --download\n"
                f"  or index an existing copy:\n"
                f"    python -m benchmarks.asrbench prepare librispeech --subset {subset} --source-dir /path/to/LibriSpeech\n"
                f"  source: {MIRRORS[0]}{subset}.tar.gz (CC BY 4.0)")

    def prepare(self, subset: str | None, source_dir: Path | None, download_ok: bool,
                options: dict[str, Any]) -> list[Dataset]:
        self.check_options(options)
        if source_dir is not None:
            wanted = [self.resolve_subset(subset)] if subset else \
                [s for s in self.subsets if find_subset_dir(source_dir, s)]
            found = {s: find_subset_dir(source_dir, s) for s in wanted}
            missing = [s for s, d in found.items() if d is None]
            if missing or not wanted:
                raise DatasetError(f"{source_dir}: no LibriSpeech subset {missing or list(self.subsets)} "
                                   f"(expected <subset>/<speaker>/<chapter>/*.trans.txt)")
            return [self._write(s, d, {"source_dir": str(source_dir.resolve())})
                    for s, d in found.items() if d is not None]
        chosen = self.resolve_subset(subset)
        cached = find_subset_dir(_download_dir(), chosen)
        if cached is None and not download_ok:
            raise DatasetUnavailable(self.acquisition(chosen))
        if cached is None:
            archive = download([m + f"{chosen}.tar.gz" for m in MIRRORS], _download_dir() / f"{chosen}.tar.gz",
                               md5=ARCHIVE_MD5[chosen])
            safe_extract(archive, _download_dir())
            archive.unlink()
            cached = find_subset_dir(_download_dir(), chosen)
            if cached is None:
                raise DatasetError(f"{chosen}.tar.gz extracted no LibriSpeech/{chosen} tree")
        return [self._write(chosen, cached, {"archive_md5": ARCHIVE_MD5[chosen],
                                             "source_url": MIRRORS[0] + f"{chosen}.tar.gz"})]

    def _write(self, subset: str, subset_dir: Path, source: dict[str, Any]) -> Dataset:
        items = index_subset(subset_dir)
        return write_prepared(self.name, subset, items, {"license": self.license, "source": source,
                                                         "corpus_dir": str(subset_dir.resolve())})
