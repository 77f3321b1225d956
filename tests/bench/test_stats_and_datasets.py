from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.asrbench import datasets
from benchmarks.asrbench.backends import create
from benchmarks.asrbench.backends.base import OptionError
from benchmarks.asrbench.stats import percentile, wer
from benchmarks.asrbench.workloads import resolve


def test_percentile_is_nearest_rank() -> None:
    values = [15, 20, 35, 40, 50]
    assert [percentile(values, p) for p in (5, 30, 40, 50, 100)] == [15, 20, 20, 35, 50]
    assert percentile([], 50) is None


def test_wer_uses_the_whisper_english_normalizer_by_default() -> None:
    assert wer(["Mr. Smith, it's 10 o'clock!"], ["mister smith it is ten o'clock"])["wer"] == 0.0
    assert wer(["Mr. Smith"], ["mister smith"], "basic")["wer"] == 0.5
    scored = wer(["a b c d", "x"], ["a b c", ""])
    assert scored["wer"] == pytest.approx(2 / 5, abs=1e-4) and scored["empty_rate"] == 0.5


def test_dev_set_and_derived_longform_keep_exact_transcripts(bench_dirs: Path, dev_data: None) -> None:
    speech = datasets.ensure("manifest/speech")
    assert speech.card["source"]["manifest"].endswith("speech/manifest.jsonl") and len(speech.items) == 28
    assert {i.id for i in speech.items if not i.text} == {"ps_chan3_noref", "fw_stereo_diarization"}
    long = datasets.ensure("longform/manifest-speech")
    texts = {i.id: i.text for i in speech.items}
    assert long.items and all(0.8 * 60 <= i.duration <= 60 for i in long.items)
    assert long.card["source"]["contiguous"] is False, "the dev set has no groups: clips joined with a gap"
    assert all(i.text and set(i.text.split()) <= {w for t in texts.values() if t for w in t.split()}
               for i in long.items)


def test_workloads_are_seeded_and_content_addressed(bench_dirs: Path) -> None:
    ds = datasets.ensure("synthetic/default")
    spec = {"dataset": "synthetic/default", "sampling": "stratified", "num_items": 4, "order": "shuffled"}
    a, b = resolve("w", spec, ds, seed=0), resolve("w", spec, ds, seed=0)
    c = resolve("w", spec, ds, seed=1)
    assert [w.uid for w in a.items] == [w.uid for w in b.items] and a.id == b.id
    assert a.id != c.id or [w.uid for w in a.items] != [w.uid for w in c.items]
    crops = resolve("crops", {"dataset": "synthetic/default", "crop_s": [1.0]}, ds, seed=0)
    assert all(w.cropped and w.duration == 1.0 and w.text is None for w in crops.items)
    assert all(len(crops.audio(w)) == 16_000 for w in crops.items)


def test_bad_manifest_and_options_give_clear_errors(tmp_path: Path, bench_dirs: Path) -> None:
    bad = tmp_path / "m.jsonl"
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(datasets.DatasetError, match="id, audio, text"):
        datasets.prepare("manifest", "bad", bad)
    with pytest.raises(OptionError, match="no option 'nope'"):
        create("mock", ["nope=1"])
    with pytest.raises(OptionError, match="expected one of"):
        create("faster_whisper", ["compute_type=float64"])
    assert create("oasr_engine", ["engine={max_wait_time: 0.05}"]).options["engine"] == {"max_wait_time": 0.05}
    assert create("oasr_server", ["url=http://h:1"]).options["base_url"] == "http://h:1"
