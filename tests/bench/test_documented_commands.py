"""The reference document's "Quick start" and "Using your own data" command blocks, verbatim
(with our paths), against tiny corpora built from dev clips in tmp dirs: every command the
document says succeeds exits 0. The download goes to a local mirror (no network); the runs
use our real engine on the embedded Whisper tiny.en."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import pytest

from benchmarks.asrbench import cli, datasets, records
from benchmarks.asrbench.datasets import librispeech
from tests.bench import corpora

# CPU time is about a minute per test on 2 cores; the timeout is wall time on a shared machine.
# the documented commands run the engine at its defaults, as a user does ('auto' quantization): they
# assert that each command succeeds and what it records, not what the numeric path transcribes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.usefixtures("dev_data"),
              pytest.mark.auto_quantization]

QUICK_START = """
python -m benchmarks.asrbench prepare librispeech --download
python -m benchmarks.asrbench run --profile smoke --backend oasr_engine -o dtype=float16
python -m benchmarks.asrbench runs
python -m benchmarks.asrbench report <run-id>
python -m benchmarks.asrbench compare <baseline-run-id> <candidate-run-id>
"""

OWN_DATA = """
python -m benchmarks.asrbench prepare manifest --subset my_set \\
    --source-dir /data/corpora/my_set/manifest.jsonl -o group_sep=__ -o language=vi
python -m benchmarks.asrbench run --profile smoke --backend oasr_engine --dataset manifest/my_set
python -m benchmarks.asrbench prepare longform --source manifest/my_set --targets 60,120
python -m benchmarks.asrbench validate --backend oasr_engine --dataset manifest/my_set \\
    --normalizer basic
"""


def commands(block: str, paths: dict[str, str]) -> list[list[str]]:
    text = block.replace("\\\n", " ")
    for placeholder, value in paths.items():
        text = text.replace(placeholder, value)
    lines = [shlex.split(line) for line in text.strip().splitlines()]
    assert all(line[:3] == ["python", "-m", "benchmarks.asrbench"] for line in lines)
    return [line[3:] for line in lines]


def test_quick_start(fresh_dirs: Path, file_server: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    served, url = file_server
    corpora.librispeech_tree(fresh_dirs / "src")
    archive = corpora.librispeech_archive(fresh_dirs / "src", served / "test-clean.tar.gz")
    monkeypatch.setattr(librispeech, "MIRRORS", (url,))
    monkeypatch.setitem(librispeech.ARCHIVE_MD5, "test-clean",
                        hashlib.md5(archive.read_bytes(), usedforsecurity=False).hexdigest())
    prepare, run, runs, *rest = commands(QUICK_START, {})
    assert cli.main(prepare) == 0
    assert cli.main(run) == 0
    run_dir = records.list_runs()[0]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["profile"]["defaults"]["primary"] == "librispeech/test-clean"
    assert {b["status"] for b in meta["benchmarks"].values()} == {"ok"}, meta["benchmarks"]
    capsys.readouterr()
    assert cli.main(runs) == 0
    assert meta["run_id"] in capsys.readouterr().out
    ids = {"<run-id>": meta["run_id"], "<baseline-run-id>": meta["run_id"], "<candidate-run-id>": meta["run_id"]}
    report, compare = commands("\n".join(shlex.join(["python", "-m", "benchmarks.asrbench", *c]) for c in rest), ids)
    assert cli.main(report) == 0
    assert (run_dir / "report" / "report.md").is_file() and (run_dir / "report" / "report.csv").is_file()
    assert cli.main(compare) == 0


def test_using_your_own_data(fresh_dirs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = corpora.manifest_corpus(fresh_dirs / "corpora")
    prepare, run, longform, validate = commands(OWN_DATA, {"/data/corpora/my_set/manifest.jsonl": str(manifest)})
    assert cli.main(prepare) == 0
    assert cli.main(run) == 0
    meta = json.loads((records.list_runs()[0] / "run.json").read_text())
    assert meta["profile"]["defaults"]["primary"] == "manifest/my_set"
    assert {b["status"] for b in meta["benchmarks"].values()} == {"ok"}, meta["benchmarks"]
    assert cli.main(longform) == 0
    built = datasets.load("longform/manifest-my_set")
    assert [i.group for i in built.items] == ["talk"], "one 52 s talk fills the 60 s target; 120 s is out of reach"
    capsys.readouterr()
    assert cli.main(validate) == 0
    out = capsys.readouterr().out
    assert "WER" in out and "empty-transcript rate 0.0" in out and "normaliser basic" in out
