"""asrbench's engine workloads (benchmarks/asrbench/engine_bench) on every family's committed
tiny model, driven through engine/loop.py: the rows are complete and consistent, a lockstep run is
reproducible whatever the machine's load (its digest of every partial and final), and no benchmark
reaches past the public engine API (no step loop of its own, no family internals). No timing is
asserted."""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks.asrbench import cli as asrbench_cli
from benchmarks.asrbench.engine_bench import measure, models
from benchmarks.asrbench.engine_bench.cli import build_parser as engine_parser
from benchmarks.asrbench.engine_bench.cli import clip_audio, engine_config
from engine import ASREngine

REPO = Path(__file__).resolve().parents[2]
CLIP = "mfa_thoughts"  # 3.6 s
STREAMING = [f for f in models.FAMILIES if f not in ("speechllm", "paraformer")]  # offline-only models


def _engine(measurement: str, family: str, max_batch_size: int) -> ASREngine:
    args = engine_parser().parse_args([measurement, "--family", family, "--quantization", "none"])
    return ASREngine(engine_config(args, None if models.TINY[family] is None else str(models.TINY[family]),
                                   max_batch_size))


@pytest.fixture(scope="module")
def audio() -> np.ndarray:
    return clip_audio(CLIP)[: 3 * measure.SAMPLE_RATE]


@pytest.mark.parametrize("family", models.FAMILIES)
def test_rtf_row_of_a_batch(family: str, audio: np.ndarray) -> None:
    engine = _engine("rtf", family, 2)
    try:
        row = measure.rtf(engine, [audio, audio[: 2 * measure.SAMPLE_RATE]])
    finally:
        engine.shutdown()
    assert row["batch"] == 2 and row["audio_s"] == 5.0
    assert row["steps"] >= 1 and row["tokens"] > 0, row  # type: ignore[operator]
    assert row["cpu_s"] > 0 and math.isfinite(row["rtfx_cpu"]), row  # type: ignore[operator,arg-type]


@pytest.mark.parametrize("family", STREAMING)
def test_lockstep_is_reproducible_and_batches_the_streams(family: str, audio: np.ndarray) -> None:
    rows = []
    for _ in range(2):
        engine = _engine("lockstep", family, 2)
        try:
            rows.append(measure.lockstep(engine, [audio, audio[: 2 * measure.SAMPLE_RATE]]))
        finally:
            engine.shutdown()
    first, second = rows
    assert first["digest"] == second["digest"] and first["steps"] == second["steps"], rows
    assert first["streams"] == 2 and first["max_batch_size"] == 2 and first["audio_s"] == 5.0
    # fed in lockstep, both streams are ready together: some step advances both at once
    assert first["max_streams_per_step"] == 2, first
    assert 1.0 <= first["mean_streams_per_step"] <= 2.0  # type: ignore[operator]
    assert first["partials"] > 0 and 0 <= first["partials_changed"] <= first["partials"]  # type: ignore[operator]


def test_lockstep_one_at_a_time_takes_more_steps(audio: np.ndarray) -> None:
    """max_batch_size 1 (a per-stream runtime) advances one stream a step: the same outputs in more steps."""
    rows = {}
    for mbs in (2, 1):
        engine = _engine("lockstep", "wenet", mbs)
        try:
            rows[mbs] = measure.lockstep(engine, [audio, audio])
        finally:
            engine.shutdown()
    assert rows[1]["max_streams_per_step"] == 1 and rows[2]["max_streams_per_step"] == 2
    assert rows[1]["steps"] > rows[2]["steps"]  # type: ignore[operator]
    assert rows[1]["digest"] == rows[2]["digest"], "batching must not change a stream's transcript"


def test_paced_row_is_complete(audio: np.ndarray) -> None:
    engine = _engine("paced", "nemo", 4)
    try:
        row = measure.paced(engine, audio[: 2 * measure.SAMPLE_RATE], sessions=2, stagger_s=0.0)
    finally:
        engine.shutdown()
    assert row["sessions"] == 2 and row["chunk_ms"] > 0  # type: ignore[operator]
    assert row["partial_p50_s"] <= row["partial_p95_s"] and row["final_p50_s"] <= row["final_p95_s"]  # type: ignore[operator]
    assert isinstance(row["keeps_up"], bool) and row["max_streams_per_step"] in (1, 2)


def test_cli_sweeps_and_appends_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = tmp_path / "records.jsonl"
    code = asrbench_cli.main(["engine", "lockstep", "--family", "zipformer", "--quantization", "none", "--clips", CLIP,
                              "--seconds", "2", "--batch", "1", "2", "--batch-sizes", "2", "1",
                              "--records", str(records)])
    assert code == 0
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["row"]["streams"], r["row"]["max_batch_size"]) for r in lines] == [(1, 2), (2, 2), (1, 1), (2, 1)]
    assert {r["family"] for r in lines} == {"zipformer"} and "tiny_streaming" in lines[0]["model"]
    assert lines[0]["command"].startswith("python -m benchmarks.asrbench engine lockstep --family zipformer")
    out = capsys.readouterr().out
    assert "| streams | max batch size |" in out and out.count("\n| ") >= 5  # header + 4 rows


def test_cli_refuses_a_measurement_the_family_cannot_serve(capsys: pytest.CaptureFixture[str]) -> None:
    assert asrbench_cli.main(["engine", "lockstep", "--family", "speechllm", "--quantization", "none",
                              "--clips", CLIP, "--seconds", "1", "--batch", "1"]) == 2
    assert "no streaming" in capsys.readouterr().err


ALLOWED_INTERNALS = {
    "benchmarks/asrbench/peers/ggml_whisper.py": "converts our Whisper weights for whisper.cpp, a peer",
    "benchmarks/asrbench/peers/hf_whisper.py": "converts our Whisper weights for transformers, a peer",
    "benchmarks/long_form.py": "WhisperOptions (edited by the long-form work; to become a family_options dict)",
    "benchmarks/family_hour.py": "the generated WeNet model its memory bounds were measured on",
}
"""Modules of benchmarks/ that import a family's own modules, and why."""


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_benchmarks_use_the_public_engine_api_only() -> None:
    offenders = []
    for path in sorted((REPO / "benchmarks").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel not in ALLOWED_INTERNALS and any(m.startswith("engine.models") for m in _imports(path)):
            offenders.append(f"{rel} imports a family's internals")
        source = path.read_text()
        # a benchmark steps the engine through engine/loop.py, never by hand (the
        # oasr_engine backend's slowed runner wraps `self._runner.execute`, which the engine calls)
        for private in re.findall(r"(?<!\w)runner\.(?:execute|admit)\(|\.append_audio\(|engine\.step\(\)", source):
            offenders.append(f"{rel} has its own step loop ({private})")
    assert not offenders, offenders
    stale = [p for p in ALLOWED_INTERNALS if not (REPO / p).is_file()]
    assert not stale, f"allowlisted files that no longer exist: {stale}"
