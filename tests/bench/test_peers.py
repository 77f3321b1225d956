"""The peers on our own weights, offline: Transformers (the drift reference) and whisper.cpp,
each on a handful of short dev clips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.asrbench import cli, profiles, records, runner
from tests.bench import corpora

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.usefixtures("dev_data")]

CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "ps_goforward", "mfa_her", "ps_cards_002")
"""mfa_her and ps_cards_002 read differently when the padding of a window differs from the
reference's (faster-whisper's 0 in the log-mel domain instead of the clip's floor)."""


@pytest.fixture(scope="module")
def clips_manifest(bench_dirs: Path) -> str:
    corpus = bench_dirs / "peers"
    corpus.mkdir(exist_ok=True)
    manifest = corpus / "manifest.jsonl"
    texts = corpora.dev_texts()
    manifest.write_text("".join(json.dumps({"id": c, "audio": str(corpora.DEV / f"{c}.flac" if (corpora.DEV / f"{c}.flac")
                                                                        .is_file() else corpora.DEV / f"{c}.wav"),
                                            "text": texts[c]}) + "\n" for c in CLIPS))
    assert cli.main(["prepare", "manifest", "--subset", "peers", "--source-dir", str(manifest)]) == 0
    return "manifest/peers"


def test_transformers_on_our_weights_is_the_drift_reference(clips_manifest: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", "--backend", "transformers", "--dataset", clips_manifest]) == 0
    reference = records.list_validations()[0]
    ref_report = json.loads((reference / "validation.json").read_text())
    assert ref_report["wer_pct"] is not None and ref_report["wer_pct"] < 20, "tiny.en reads clean short clips"
    assert ref_report["backend"]["info"]["converted_from"]["format"] == "ctranslate2"
    capsys.readouterr()
    assert cli.main(["validate", "--backend", "oasr_engine", "--dataset", clips_manifest, "-o", "reference_exact=true",
                     "--reference", reference.name, "--max-drift-wer", "1"]) == 0
    out = capsys.readouterr().out
    assert "WER" in out and "empty-transcript rate 0.0" in out and "drift WER" in out
    drift = json.loads((records.list_validations()[0] / "validation.json").read_text())["drift"]
    assert drift["n"] == len(CLIPS) and drift["drift_wer_pct"] <= 1.0, drift


def test_transformers_uses_whisper_ckpt_when_it_is_a_transformers_directory(
        clips_manifest: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.asrbench.peers.hf_whisper import is_hf_whisper, transformers_model_dir

    converted = transformers_model_dir()
    assert is_hf_whisper(converted)
    monkeypatch.setenv("WHISPER_CKPT", str(converted))
    assert transformers_model_dir(str(converted)) == converted, "an HF-format dir is used as it is"


def test_whisper_cpp_runs_our_weights_as_ggml_and_declares_its_gaps(clips_manifest: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = {"name": "peer-cpp", "description": "test", "defaults": {"primary": clips_manifest},
            "workloads": {"clips": {"dataset": "${primary}", "sampling": "all", "require_text": True}},
            "benchmarks": [{"name": "single", "kind": "single", "workload": "clips", "warmup": 0},
                           {"name": "batch", "kind": "batch", "workload": "clips"},
                           {"name": "load", "kind": "load", "workload": "clips"}]}
    monkeypatch.setitem(profiles.PROFILES, "peer-cpp", tiny)
    run_dir = runner.run("peer-cpp", "whisper_cpp", [], monitor=False)
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["benchmarks"]["batch"]["status"] == "unsupported"
    assert "one call at a time" in meta["benchmarks"]["load"]["reason"]
    single = json.loads((run_dir / "summary.json").read_text())["points"]["single/default"]["metrics"]
    assert single["n_ok"] == len(CLIPS) and single["wer"] < 0.2
