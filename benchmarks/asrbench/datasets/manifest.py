"""Your own corpus: a JSON Lines manifest indexed in place (nothing is copied).

One object per line, `{"id": ..., "audio": ..., "text": ...}`; optional `speaker` and
`group` are kept, other keys are ignored. Durations come from the audio headers. The
manifest file's SHA-256 is the dataset revision, so editing the manifest changes every
workload id built on it.

Relative `audio` paths resolve against `-o audio_root=DIR`, or else the first of the
manifest's folder, `$WAV_DIR` and `$AUDIO_DIR` that holds EVERY referenced file: a folder
holding only some of them is never used, because that would silently benchmark a subset.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.asrbench.datasets.base import (
    Dataset,
    DatasetAdapter,
    DatasetError,
    DatasetUnavailable,
    Item,
    probe,
    sha256_file,
    write_prepared,
)
from benchmarks.asrbench.paths import env_path

ROOT_ENV = ("WAV_DIR", "AUDIO_DIR")


def default_subset_name(manifest: Path) -> str:
    """The file stem, or the folder's name when the file is called manifest.jsonl."""
    return manifest.parent.name if manifest.name == "manifest.jsonl" else manifest.stem


def _entries(manifest: Path) -> list[dict[str, Any]]:
    entries = []
    for lineno, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict) or not isinstance(entry["id"], str) or not isinstance(entry["audio"], str):
                raise TypeError("id and audio must be strings")
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DatasetError(f"{manifest}:{lineno}: expected a JSON object with id, audio, text ({exc})") from exc
        entries.append(entry)
    if not entries:
        raise DatasetError(f"{manifest}: no entries")
    return entries


def choose_audio_root(manifest: Path, relative: list[str], explicit: str | None) -> Path:
    """The documented resolution rule; raises when no candidate holds every relative file."""
    if explicit:
        candidates = [Path(explicit).expanduser()]
    else:
        candidates = [manifest.parent, *[p for p in (env_path(v) for v in ROOT_ENV) if p is not None]]
    held = {}
    for root in candidates:
        present = sum(1 for rel in relative if (root / rel).is_file())
        if present == len(relative):
            return root.resolve()
        held[str(root)] = present
    detail = ", ".join(f"{root} holds {n}" for root, n in held.items())
    raise DatasetError(f"{manifest}: no audio root holds all {len(relative)} relative audio files ({detail}); "
                       "pass -o audio_root=DIR")


class Manifest(DatasetAdapter):
    name = "manifest"
    license = "as supplied"
    acquisition_summary = "indexed in place from a local JSONL manifest (--source-dir FILE)"
    size = "as supplied"
    durations = "as supplied"
    role = "your own corpus"
    default_subset = ""
    options: ClassVar[dict[str, str]] = {
        "audio_root": "folder relative audio paths resolve against (default: the first of the manifest's folder, "
                      "$WAV_DIR, $AUDIO_DIR that holds every file)",
        "group_sep": "derive each item's group from its id (with __, lesson__07 is in group lesson)",
        "language": "recorded for provenance",
        "license": "recorded for provenance",
    }

    def acquisition(self, subset: str) -> str:
        return ("prepare manifest needs the manifest file:\n"
                "    python -m benchmarks.asrbench prepare manifest --subset my_set "
                "--source-dir /data/corpora/my_set/manifest.jsonl")

    def prepare(self, subset: str | None, source_dir: Path | None, download_ok: bool,
                options: dict[str, Any]) -> list[Dataset]:
        self.check_options(options)
        if source_dir is None:
            raise DatasetUnavailable(self.acquisition(subset or "my_set"))
        manifest = source_dir / "manifest.jsonl" if source_dir.is_dir() else source_dir
        if not manifest.is_file():
            raise DatasetError(f"manifest {manifest} does not exist")
        entries = _entries(manifest)
        relative = [e["audio"] for e in entries if not Path(e["audio"]).is_absolute()]
        root = choose_audio_root(manifest, relative, options.get("audio_root")) if relative else None
        sep = options.get("group_sep")
        items, seen = [], set()
        for e in entries:
            if e["id"] in seen:
                raise DatasetError(f"{manifest}: duplicate id {e['id']!r}")
            seen.add(e["id"])
            path = Path(e["audio"]) if Path(e["audio"]).is_absolute() else root / e["audio"]  # type: ignore[operator]
            if not path.is_file():
                raise DatasetError(f"{manifest}: {e['id']}: audio {path} does not exist")
            duration, rate = probe(path)
            text = e.get("text")
            group = e.get("group") or (e["id"].split(sep)[0] if sep and sep in e["id"] else None)
            items.append(Item(id=e["id"], audio=str(path.resolve()), duration=round(duration, 4), sample_rate=rate,
                              text=str(text).strip() if isinstance(text, str) and text.strip() else None,
                              speaker=e.get("speaker"), group=group))
        card = {"license": options.get("license", self.license), "language": options.get("language"),
                "source": {"manifest": str(manifest.resolve()), "manifest_file_sha256": sha256_file(manifest),
                           "audio_root": str(root) if root else None, "group_sep": sep}}
        return [write_prepared(self.name, subset or default_subset_name(manifest), items, card,
                               revision=card["source"]["manifest_file_sha256"])]
