"""The gate on our real engine: a candidate whose engine sleeps per step (OASR_TEST_STEP_DELAY_MS,
read only by engine/engine.py for this purpose) fails compare; the baseline against itself passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.asrbench import cli, profiles, runner
from benchmarks.asrbench.paths import DEFAULT_MANIFEST, REPO_ROOT

ENGINE = REPO_ROOT / "engine" / "engine.py"


@pytest.mark.slow
def test_slowed_engine_fails_the_gate(bench_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not DEFAULT_MANIFEST.is_file():
        pytest.skip(f"shared speech data not present at {DEFAULT_MANIFEST}")
    if "OASR_TEST_STEP_DELAY_MS" not in ENGINE.read_text():
        pytest.skip("engine/engine.py does not honour OASR_TEST_STEP_DELAY_MS")
    gate = {"description": "engine gate test", "dataset": "speech", "max_clip_s": 2.0, "seed": 0,
            "kinds": {"single": {"warmup": 1, "requests": 2}}}
    monkeypatch.setitem(profiles.PROFILES, "engine-gate", gate)
    monkeypatch.delenv("OASR_TEST_STEP_DELAY_MS", raising=False)
    base = runner.run("engine-gate", "oasr_engine", ["max_batch_size=4"])
    monkeypatch.setenv("OASR_TEST_STEP_DELAY_MS", "250")
    slowed = runner.run("engine-gate", "oasr_engine", ["max_batch_size=4"])
    assert json.loads((slowed / "run.json").read_text())["backend"]["info"]["test_step_delay_ms"] == 250
    assert cli.main(["compare", str(base), str(base)]) == 0
    assert cli.main(["compare", str(base), str(slowed)]) == 1
