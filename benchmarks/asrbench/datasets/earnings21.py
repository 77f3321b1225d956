"""Earnings-21 (CC BY-SA 4.0): 44 whole earnings calls, real long-form audio.

Indexed from local Parquet shards (`--source-dir FILE_OR_DIR`) in the Hugging Face layout
of `distil-whisper/earnings21` (config `full`, split `test`): one row per call with an
`audio` struct (`bytes`, `path`), `file_id` and `transcription`. The calls are decoded once
and written to `audio/<file_id>.flac` at 16 kHz mono, so runs do not re-decode Parquet.

`--download [--shards N]` fetches N shards from the Hub (`$HF_ENDPOINT`, `$HF_TOKEN`): the
revision is resolved to a commit once and recorded, and each shard is verified against the
SHA-256 the Hub lists for it.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.asrbench.datasets.base import (
    Dataset,
    DatasetAdapter,
    DatasetError,
    DatasetUnavailable,
    Item,
    sha256_file,
    write_prepared,
)
from benchmarks.asrbench.datasets.download import DownloadError, download
from benchmarks.asrbench.paths import data_root

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

REPO = "distil-whisper/earnings21"
CONFIG = "full"
REVISION = "main"
TEXT_COLUMNS = ("transcription", "text", "sentence")
ID_COLUMNS = ("file_id", "id")


def _shard_paths(source: Path) -> list[Path]:
    shards = [source] if source.is_file() else sorted(source.rglob("*.parquet"))
    if not shards:
        raise DatasetError(f"{source}: no .parquet shard")
    return shards


def _decode(blob: bytes) -> np.ndarray:
    import numpy as np
    import soundfile as sf

    from benchmarks.asrbench import audio as audio_io

    try:
        data, rate = sf.read(io.BytesIO(blob), dtype="float32", always_2d=True)
    except sf.LibsndfileError:
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".audio") as tmp:
            tmp.write(blob)
            tmp.flush()
            return audio_io.decode_file(Path(tmp.name))
    mono = data.mean(axis=1)
    if rate != audio_io.SAMPLE_RATE:
        import soxr

        mono = soxr.resample(mono, rate, audio_io.SAMPLE_RATE)
    return np.ascontiguousarray(mono, dtype=np.float32)


def _column(names: list[str], wanted: tuple[str, ...], shard: Path) -> str:
    for name in wanted:
        if name in names:
            return name
    raise DatasetError(f"{shard}: none of the columns {list(wanted)} (has {names})")


class Earnings21(DatasetAdapter):
    name = "earnings21"
    license = "CC BY-SA 4.0"
    acquisition_summary = "Parquet shards from the Hub, SHA-256-verified (238-652 MB each); or --source-dir"
    size = "44 calls, 39 h (4.4 GB in all)"
    durations = "whole calls, mean ≈ 53 min"
    role = "real long-form audio and long live sessions"
    subsets = ("test",)
    default_subset = "test"

    def acquisition(self, subset: str) -> str:
        return ("Earnings-21 is not prepared.\n"
                "  download shards from the Hub (each 238-652 MB, SHA-256-verified):\n"
                "    python -m benchmarks.asrbench prepare earnings21 --download --shards 1\n"
                "  or index Parquet shards you already have:\n"
                "    python -m benchmarks.asrbench prepare earnings21 --source-dir /data/earnings21/full\n"
                f"  source: {REPO} (config {CONFIG}, split {subset}), CC BY-SA 4.0")

    def prepare(self, subset: str | None, source_dir: Path | None, download_ok: bool,
                options: dict[str, Any]) -> list[Dataset]:
        shards_wanted = int(options.pop("shards", 1) or 1)
        self.check_options(options)
        chosen = self.resolve_subset(subset)
        source: dict[str, Any]
        if source_dir is not None:
            shards = _shard_paths(source_dir)
            source = {"source_dir": str(source_dir.resolve())}
        elif download_ok:
            shards, source = self._download(chosen, shards_wanted)
        else:
            raise DatasetUnavailable(self.acquisition(chosen))
        return [self._index(chosen, shards, source)]

    def _index(self, subset: str, shards: list[Path], source: dict[str, Any]) -> Dataset:
        import numpy as np
        import pyarrow.parquet as pq
        import soundfile as sf

        from benchmarks.asrbench import audio as audio_io

        out_dir = data_root() / self.name / subset / "audio"
        out_dir.mkdir(parents=True, exist_ok=True)
        items = []
        for shard in shards:
            table = pq.ParquetFile(shard)
            names = table.schema_arrow.names
            text_col, id_col = _column(names, TEXT_COLUMNS, shard), _column(names, ID_COLUMNS, shard)
            for batch in table.iter_batches(batch_size=1, columns=["audio", text_col, id_col]):
                row = batch.to_pylist()[0]
                call_id = str(row[id_col])
                blob = (row["audio"] or {}).get("bytes")
                if not blob:
                    raise DatasetError(f"{shard}: call {call_id} has no audio bytes")
                target = out_dir / f"{call_id}.flac"
                samples = _decode(blob)
                if not target.is_file():
                    sf.write(str(target), np.clip(samples, -1, 1), audio_io.SAMPLE_RATE, format="FLAC")
                items.append(Item(id=call_id, audio=f"audio/{target.name}",
                                  duration=round(len(samples) / audio_io.SAMPLE_RATE, 4),
                                  sample_rate=audio_io.SAMPLE_RATE, text=str(row[text_col] or "").strip() or None,
                                  group=call_id))
        source["shards"] = [{"file": s.name, "sha256": sha256_file(s)} for s in shards]
        return write_prepared(self.name, subset, items, {"license": self.license, "source": source})

    def _download(self, subset: str, count: int) -> tuple[list[Path], dict[str, Any]]:
        import httpx

        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
        token = os.environ.get("HF_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else None
        api = f"{endpoint}/api/datasets/{REPO}"
        try:
            commit = httpx.get(f"{api}/revision/{REVISION}", headers=headers, timeout=30).raise_for_status().json()["sha"]
            tree = httpx.get(f"{api}/tree/{commit}/{CONFIG}", params={"recursive": "true"}, headers=headers,
                             timeout=30).raise_for_status().json()
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise DownloadError(f"cannot list {REPO} on {endpoint}: {type(exc).__name__}: {exc}") from exc
        files = sorted((f for f in tree if f.get("path", "").endswith(".parquet") and subset in f["path"]),
                       key=lambda f: f["path"])[:count]
        if not files:
            raise DownloadError(f"{REPO}@{commit}: no {CONFIG}/{subset} Parquet shard listed")
        cache = data_root() / self.name / "_download"
        shards = [download([f"{endpoint}/datasets/{REPO}/resolve/{commit}/{f['path']}"],
                           cache / Path(f["path"]).name, sha256=f["lfs"]["oid"], headers=headers) for f in files]
        return shards, {"repo": REPO, "config": CONFIG, "revision": commit, "endpoint": endpoint}
