"""A real backend through the suite: faster-whisper on real speech, with declared gaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.asrbench import profiles, runner
from benchmarks.asrbench.paths import DEFAULT_MANIFEST

pytest.importorskip("faster_whisper")


def test_faster_whisper_transcribes_real_speech_and_reports_unsupported_kinds(
        bench_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"shared speech data not present at {DEFAULT_MANIFEST}")
    tiny = {"description": "test", "dataset": "speech", "max_clip_s": 5.0, "seed": 0,
            "kinds": {"single": {"warmup": 0, "requests": 3}, "batch": {}, "streaming": {}}}
    monkeypatch.setitem(profiles.PROFILES, "tiny-real", tiny)
    run_dir = runner.run("tiny-real", "faster_whisper", ["compute_type=int8"])
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["kinds"]["batch"]["status"] == "unsupported" and "ONE file" in meta["kinds"]["batch"]["reason"]
    assert meta["kinds"]["streaming"]["status"] == "unsupported"
    assert meta["backend"]["simulated"] is False and meta["backend"]["info"]["ctranslate2"]
    summary = json.loads((run_dir / "summary.json").read_text())
    single = summary["points"]["single/default"]
    assert single["status"] == "ok" and single["metrics"]["n_ok"] == 3
    assert single["metrics"]["wer"] < 0.3, "tiny.en transcribes short clean clips"
    assert summary["points"]["batch/*"]["status"] == "unsupported"
