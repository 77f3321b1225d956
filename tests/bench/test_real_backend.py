"""A real backend through the suite: faster-whisper on real speech, with declared gaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.asrbench import profiles, runner
from benchmarks.asrbench.paths import DEFAULT_MANIFEST


def test_faster_whisper_transcribes_real_speech_and_reports_unsupported_kinds(
        bench_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEFAULT_MANIFEST.is_file(), f"shared speech data not present at {DEFAULT_MANIFEST}"
    tiny = {"name": "tiny-real", "description": "test", "defaults": {"primary": "manifest/speech"},
            "workloads": {"clips": {"dataset": "${primary}", "sampling": "first", "num_items": 3,
                                    "duration_range": [0, 5], "require_text": True}},
            "benchmarks": [{"name": "single", "kind": "single", "workload": "clips", "warmup": 0},
                           {"name": "batch", "kind": "batch", "workload": "clips"},
                           {"name": "streaming", "kind": "streaming", "workload": "clips"}]}
    monkeypatch.setitem(profiles.PROFILES, "tiny-real", tiny)
    run_dir = runner.run("tiny-real", "faster_whisper", ["compute_type=int8"])
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["benchmarks"]["batch"]["status"] == "unsupported" and "ONE file" in meta["benchmarks"]["batch"]["reason"]
    assert meta["benchmarks"]["streaming"]["status"] == "unsupported"
    assert meta["backend"]["simulated"] is False and meta["backend"]["info"]["ctranslate2"]
    summary = json.loads((run_dir / "summary.json").read_text())
    single = summary["points"]["single/default"]
    assert single["status"] == "ok" and single["metrics"]["n_ok"] == 3
    assert single["metrics"]["wer"] < 0.3, "tiny.en transcribes short clean clips"
    assert summary["points"]["batch/*"]["status"] == "unsupported"
