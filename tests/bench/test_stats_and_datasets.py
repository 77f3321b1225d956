from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.asrbench import datasets
from benchmarks.asrbench.backends import create
from benchmarks.asrbench.backends.base import OptionError
from benchmarks.asrbench.paths import DEFAULT_MANIFEST
from benchmarks.asrbench.stats import percentile, wer


def test_percentile_is_nearest_rank() -> None:
    values = [15, 20, 35, 40, 50]
    assert [percentile(values, p) for p in (5, 30, 40, 50, 100)] == [15, 20, 20, 35, 50]
    assert percentile([], 50) is None


def test_wer_uses_the_whisper_english_normalizer() -> None:
    assert wer(["Mr. Smith, it's 10 o'clock!"], ["mister smith it is ten o'clock"])["wer"] == 0.0
    scored = wer(["a b c d", "x"], ["a b c", ""])
    assert scored["wer"] == pytest.approx(2 / 5, abs=1e-4) and scored["empty_rate"] == 0.5


def test_manifest_prepare_is_content_addressed_and_skips_unusable_clips(bench_dirs: Path) -> None:
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"shared speech data not present at {DEFAULT_MANIFEST}")
    first = datasets.prepare_manifest(DEFAULT_MANIFEST, "speech")
    again = datasets.prepare_manifest(DEFAULT_MANIFEST, "speech")
    assert first.id == again.id and len(first.items) >= 20
    assert "ps_chan3_noref" in first.source["skipped"] and "fw_stereo_diarization" in first.source["skipped"]
    assert all(i.text for i in first.items)
    long = datasets.prepare_longform("speech", [30.0, 60.0], name="lf-test")
    texts = {i.id: i.text for i in first.items}
    for item, target in zip(long.items, (30.0, 60.0), strict=True):
        assert 0.8 * target <= item.duration_s <= target
        pieces = long.source["pieces"][item.id]
        assert item.text == " ".join(texts[p] for p in pieces), "exact transcripts kept"


def test_synthetic_is_deterministic(bench_dirs: Path) -> None:
    a = datasets.prepare_synthetic("syn-a", count=3, seed=7)
    b = datasets.prepare_synthetic("syn-b", count=3, seed=7)
    c = datasets.prepare_synthetic("syn-c", count=3, seed=8)
    assert a.id == b.id != c.id
    index = json.loads((a.root / "index.json").read_text())
    assert [i["sha256"] for i in index["items"]] == [i.sha256 for i in b.items]


def test_bad_manifest_and_options_give_clear_errors(tmp_path: Path, bench_dirs: Path) -> None:
    bad = tmp_path / "m.jsonl"
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(datasets.DatasetError, match="id, audio, text"):
        datasets.prepare_manifest(bad, "bad")
    with pytest.raises(OptionError, match="no option 'nope'"):
        create("mock", ["nope=1"])
    with pytest.raises(OptionError, match="expected one of"):
        create("faster_whisper", ["compute_type=float64"])
