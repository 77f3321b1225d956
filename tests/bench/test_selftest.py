"""The selftest profile end to end: mock backend on synthetic audio, every kind, every record."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.asrbench import cli
from benchmarks.asrbench.kinds import KINDS
from benchmarks.asrbench.records import load_run
from benchmarks.asrbench.summary import summarize


def test_selftest_runs_every_kind_and_writes_all_records(selftest_run: Path, bench_dirs: Path) -> None:
    assert selftest_run.parent == bench_dirs / "results"
    meta = json.loads((selftest_run / "run.json").read_text())
    assert meta["status"] == "ok" and meta["finished_utc"] and meta["schema_version"] == 2
    assert {v["kind"]: v["status"] for v in meta["benchmarks"].values()} == {k: "ok" for k in KINDS}
    assert selftest_run.name.endswith("_selftest_mock_" + meta["run_id"])
    assert {p.stem for p in (selftest_run / "workloads").glob("*.json")} == {"utterances", "long"}
    assert meta["backend"]["simulated"] is True
    env = meta["environment"]
    assert env["cpu_logical"] >= 1 and env["memory_total_mb"] > 0 and env["packages"]["numpy"]
    run = load_run(selftest_run)
    assert {r["kind"] for r in run["requests"]} == set(KINDS) - {"streaming"}
    assert {s["point"] for s in run["sessions"]} >= {"paced", "unpaced"}
    assert all(r["simulated"] is True for r in [*run["requests"], *run["sessions"]]), "mock output is flagged"
    assert {s["role"] for s in run["resources"]} == {"bench", "host"}, "the monitor sampled bench and host"
    summary = json.loads((selftest_run / "summary.json").read_text())
    assert summary["simulated"] is True
    single = summary["points"]["single/default"]["metrics"]
    assert single["n"] == 6 and single["rtfx"] > 0 and single["bucket.very_short.latency_ms_p50"] is not None and single["latency_ms_p50"] <= single["latency_ms_p99"]


def test_warmup_is_recorded_but_excluded_from_summaries(selftest_run: Path) -> None:
    run = load_run(selftest_run)
    warm = [r for r in run["requests"] if r["kind"] == "single" and r["phase"] == "warmup"]
    assert len(warm) == 1
    assert summarize(run)["points"]["single/default"]["metrics"]["n"] == 6


def test_open_loop_latency_counts_from_the_scheduled_send(selftest_run: Path) -> None:
    opened = [r for r in load_run(selftest_run)["requests"] if r["point"].startswith("open-")]
    assert opened and all(r["rate_rps"] > 0 for r in opened)
    for r in opened:
        assert r["send_lag_ms"] >= 0
        assert abs(r["latency_ms"] - (r["done_ms"] - r["sched_ms"])) < 0.01
    offsets = sorted(r["sched_ms"] for r in opened)
    assert len(set(offsets)) == len(offsets), "Poisson arrivals are distinct scheduled times"


def test_paced_streaming_measures_live_latencies(selftest_run: Path) -> None:
    paced = [s for s in load_run(selftest_run)["sessions"] if s["point"] == "paced"]
    for s in paced:
        assert s["ok"] and s["first_partial_ms"] is not None and s["final_latency_ms"] is not None
        # Paced: the stream cannot end before its audio would have been recorded.
        assert s["end_of_audio_ms"] - s["start_ms"] >= s["audio_s"] * 1000 - 1
        assert len(s["partial_times_ms"]) >= 2


def test_recompute_reproduces_the_stored_summary(selftest_run: Path) -> None:
    assert cli.main(["recompute", str(selftest_run)]) == 0


def test_recompute_detects_a_summary_that_does_not_match_the_records(selftest_run: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(selftest_run, copy)
    lines = (copy / "requests.jsonl").read_text().splitlines()
    rec = json.loads(lines[-1])
    rec["latency_ms"] += 1000.0
    (copy / "requests.jsonl").write_text("\n".join([*lines[:-1], json.dumps(rec)]) + "\n")
    assert cli.main(["recompute", str(copy)]) == 1
