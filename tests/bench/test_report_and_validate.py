"""Reports side by side with peer ratios; validate's WER ceiling and drift; baselines by name."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest

from benchmarks.asrbench import cli, runner
from benchmarks.asrbench.records import list_validations
from benchmarks.asrbench.report import main_table, write_report


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_report_puts_runs_side_by_side_with_ratios_against_the_peer(selftest_run: Path, tmp_path: Path) -> None:
    ours = _summary(selftest_run)
    peer = copy.deepcopy(ours)
    peer.update(backend="faster_whisper", label="faster_whisper[int8]", run_id="peer", simulated=False)
    peer["points"]["single/default"]["metrics"]["rtfx"] = ours["points"]["single/default"]["metrics"]["rtfx"] / 2
    table = main_table([ours, peer])
    header, _sep, our_row, peer_row = table.splitlines()
    cols = [c.strip() for c in header.strip("|").split("|")]
    ours_cells = [c.strip() for c in our_row.strip("|").split("|")]
    assert ours_cells[0] == "mock (SIMULATED)"
    assert ours_cells[cols.index("single RTFx ×peer")] == "2.00×"
    assert [c.strip() for c in peer_row.strip("|").split("|")][cols.index("single RTFx ×peer")] == "1.00×"

    meta = json.loads((selftest_run / "run.json").read_text())
    md = write_report(tmp_path / "rep", [ours, peer], [meta, meta], plots=True)
    assert "## Main table" in md and (tmp_path / "rep" / "rtfx.png").stat().st_size > 0
    with (tmp_path / "rep" / "report.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["label"] for r in rows} == {"mock", "faster_whisper[int8]"}
    rtfx = [r for r in rows if r["label"] == "mock" and r["point"] == "single/default" and r["metric"] == "rtfx"]
    assert float(rtfx[0]["value"]) == pytest.approx(2 * float(rtfx[0]["peer_value"]), rel=1e-3)


def test_validate_measures_wer_and_drift_against_a_reference(bench_dirs: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    base = ["validate", "--backend", "mock", "--dataset", "synthetic/default"]
    before = set(list_validations())
    assert cli.main([*base, "-o", "error_rate=0"]) == 0
    (clean,) = set(list_validations()) - before
    assert "WER 0.0 %" in capsys.readouterr().out
    assert cli.main([*base, "-o", "error_rate=0.6", "--max-wer", "30"]) == 1
    assert cli.main([*base, "-o", "error_rate=0.6", "--reference", clean.name, "--max-drift-wer", "10"]) == 1
    out = capsys.readouterr().out
    assert "drift WER" in out and "hypotheses changed" in out
    reports = {d: json.loads((d / "validation.json").read_text()) for d in set(list_validations()) - before}
    drifted = [r for r in reports.values() if r.get("drift")]
    assert len(drifted) == 1 and drifted[0]["drift"]["drift_wer_pct"] > 10 and drifted[0]["drift"]["changed"] > 0
    assert cli.main([*base, "-o", "error_rate=0", "--reference", clean.name, "--max-drift-wer", "0"]) == 0
    noisy = next(d for d, r in reports.items() if not r.get("drift") and r["backend"]["options"]["error_rate"] > 0)
    assert cli.main(["compare", clean.name, noisy.name]) == 1, "validations compare on wer_pct"
    assert cli.main(["compare", clean.name, clean.name]) == 0


def test_old_validate_spelling_still_scores_a_run_with_a_deprecation_line(
        selftest_run: Path, caplog: pytest.LogCaptureFixture) -> None:
    noisy = runner.run("selftest", "mock", ["error_rate=0.6"], only=["single"])
    assert cli.main(["validate", str(noisy), "--max-wer", "0.3"]) == 1
    assert cli.main(["validate", str(selftest_run), "--max-wer", "0.3"]) == 0
    assert any("deprecated: validate RUN" in r.message for r in caplog.records)


def test_baselines_are_found_by_name(selftest_run: Path, bench_dirs: Path) -> None:
    assert cli.main(["save-baseline", str(selftest_run), "--name", "main"]) == 0
    assert (bench_dirs / "results" / "baselines" / "main" / "requests.jsonl").is_file()
    assert cli.main(["compare", "main", str(selftest_run)]) == 0
    run_id = json.loads((selftest_run / "run.json").read_text())["run_id"]
    assert cli.main(["compare", "main", run_id]) == 0, "a run id as `runs` prints it"
    assert cli.main(["compare", "no-such-baseline", str(selftest_run)]) == 2
