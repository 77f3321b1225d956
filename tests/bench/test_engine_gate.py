"""The gate on our real engine: a candidate whose runner sleeps per step (the oasr_engine backend's
`step_delay_ms` option wraps the runner) fails compare; the baseline against itself passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.asrbench import cli, profiles, runner
from benchmarks.asrbench.paths import DEFAULT_MANIFEST


@pytest.mark.slow
@pytest.mark.auto_quantization  # the gate compares the engine at its defaults with itself slowed down
def test_slowed_engine_fails_the_gate(bench_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEFAULT_MANIFEST.is_file(), f"shared speech data not present at {DEFAULT_MANIFEST}"
    gate = {"description": "engine gate test", "dataset": "speech", "max_clip_s": 2.0, "seed": 0,
            "kinds": {"single": {"warmup": 1, "requests": 2}}}
    monkeypatch.setitem(profiles.PROFILES, "engine-gate", gate)
    base = runner.run("engine-gate", "oasr_engine", ["max_batch_size=4"])
    slowed = runner.run("engine-gate", "oasr_engine", ["max_batch_size=4", "step_delay_ms=250"])
    assert json.loads((slowed / "run.json").read_text())["backend"]["info"]["step_delay_ms"] == 250
    assert cli.main(["compare", str(base), str(base)]) == 0
    assert cli.main(["compare", str(base), str(slowed)]) == 1
