"""compare as a gate: itself passes, a slowed engine fails, other workloads are not comparable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.asrbench import cli, profiles, runner
from benchmarks.asrbench.compare import DEFAULT_METRICS, ThresholdsError, compare, load_thresholds


def test_a_run_against_itself_passes(selftest_run: Path) -> None:
    assert cli.main(["compare", str(selftest_run), str(selftest_run)]) == 0


def test_a_deliberately_slowed_candidate_fails(selftest_run: Path, slowed_run: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert json.loads((slowed_run / "run.json").read_text())["backend"]["info"]["test_step_delay_ms"] == 40
    assert cli.main(["compare", str(selftest_run), str(slowed_run)]) == 1
    out = capsys.readouterr().out
    assert "| single/default | latency_ms_p50 |" in out and "REGRESSION" in out


def test_thresholds_file_can_loosen_the_gate(selftest_run: Path, slowed_run: Path, tmp_path: Path) -> None:
    loose = tmp_path / "loose.yaml"
    loose.write_text("metrics:\n  wer: {absolute: 0.5}\n")
    assert cli.main(["compare", str(selftest_run), str(slowed_run), "--thresholds", str(loose)]) == 0


def test_different_workload_is_not_comparable(selftest_run: Path) -> None:
    other = runner.run("selftest", "mock", [], overrides=profiles.Overrides(num_items=2, only=["single"]))
    assert cli.main(["compare", str(selftest_run), str(other)]) == 2


def _summary(points: dict[str, object], simulated: bool = False) -> dict[str, object]:
    return {"run_id": "r", "profile": "p", "workload_hash": "h", "simulated": simulated, "points": points}


def _point(p50: float, spread: float) -> dict[str, object]:
    return {"status": "ok", "metrics": {"latency_ms_p50": p50}, "spread": {"latency_ms_p50": spread}}


def test_noise_aware_a_change_within_the_baseline_spread_passes() -> None:
    metrics = load_thresholds(None)
    base = _summary({"single/default": _point(100.0, 30.0)})
    assert compare(base, _summary({"single/default": _point(125.0, 1.0)}), metrics)[0] == 0  # > 10 % but < IQR
    assert compare(base, _summary({"single/default": _point(135.0, 1.0)}), metrics)[0] == 1  # beyond both


def test_missing_or_failed_point_is_a_regression_and_simulated_vs_real_is_not_comparable() -> None:
    metrics = load_thresholds(None)
    base = _summary({"single/default": _point(100.0, 0.0)})
    assert compare(base, _summary({}), metrics)[0] == 1
    assert compare(base, _summary({"single/default": {"status": "failed"}}), metrics)[0] == 1
    assert compare(base, _summary({"single/default": _point(100.0, 0.0)}, simulated=True), metrics)[0] == 2
    assert set(metrics.metrics) == set(DEFAULT_METRICS)


def test_per_kind_tolerances_replace_the_global_ones(tmp_path: Path) -> None:
    spec = tmp_path / "t.json"
    spec.write_text(json.dumps({"metrics": {"latency_ms_p50": 0.1}, "kinds": {"cold_start": {"latency_ms_p50": 0.5}}}))
    thresholds = load_thresholds(spec)
    base = _summary({"cold_start/default": _point(100.0, 0.0), "single/default": _point(100.0, 0.0)})
    cand = _summary({"cold_start/default": _point(140.0, 0.0), "single/default": _point(105.0, 0.0)})
    assert compare(base, cand, thresholds)[0] == 0
    cand["points"]["single/default"] = _point(140.0, 0.0)
    assert compare(base, cand, thresholds)[0] == 1
    spec.write_text("metrics: [latency_ms_p50]")
    with pytest.raises(ThresholdsError):
        load_thresholds(spec)
