"""`oasr models pull NAME` and `OASR_MODEL`, against a hub-shaped server on 127.0.0.1 (tests/hub_server.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.cli.common import EXIT_FAILURE, EXIT_OK
from tests.hub_server import HubServer
from tests.paths import REPO

CHECKPOINT = REPO / "tests" / "fixtures" / "nemo" / "ctc_striding_bn" / "model.nemo"
REPO_ID = "nvidia/stt_en_tiny_ctc"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    server = HubServer()
    server.add_commit(REPO_ID, {"model.nemo": CHECKPOINT.read_bytes(), "README.md": b"card\n"})
    server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.close()


def test_pull_downloads_with_a_progress_bar_and_prints_where(hub: HubServer, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["models", "pull", REPO_ID]) == EXIT_OK
    out, err = capsys.readouterr()
    name, family, path = out.strip().split("\t")
    assert (name, family) == (REPO_ID, "nemo")
    assert sorted(p.name for p in Path(path).iterdir()) == ["model.nemo"]
    assert (Path(path) / "model.nemo").read_bytes() == CHECKPOINT.read_bytes()
    assert f"{CHECKPOINT.stat().st_size / 1e6:.2f}M" in err  # tqdm's byte bar reached the file's size

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what an air-gapped image runs with afterwards
    before = len(hub.requests)
    assert main(["models", "pull", REPO_ID]) == EXIT_OK
    assert capsys.readouterr().out.strip().split("\t")[2] == path
    assert hub.requests[before:] == []


def test_pull_of_a_missing_repo_fails_naming_it(hub: HubServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "pull", "nobody/nothing-here"]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "oasr models: error: model repo 'nobody/nothing-here' was not found" in err


def test_oasr_model_setting_reaches_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.settings import Settings

    monkeypatch.setenv("OASR_MODEL", "distil-large-v3")
    monkeypatch.setenv("OASR_MODEL_REVISION", "v2")
    config = Settings().engine_config()
    assert (config.ckpt_dir, config.revision) == ("distil-large-v3", "v2")
    monkeypatch.setenv("OASR_CKPT_DIR", "/elsewhere")
    with pytest.raises(ValueError, match="both name the model"):
        Settings().engine_config()
