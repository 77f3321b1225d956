"""Models by name (engine/hub.py) against a hub-shaped HTTP server on 127.0.0.1 (tests/hub_server.py):
nothing leaves the machine. The repos hold real checkpoints: the embedded Whisper tiny.en's files
(published as Systran/faster-whisper-tiny.en) and NeMo-written .nemo fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from tqdm.auto import tqdm

from engine.config import EngineConfig, embedded_checkpoint_dir
from engine.errors import CheckpointError, InvalidRequestError
from engine.hub import ALIASES, ModelNotFoundError, hub_patterns, parse_model_name, resolve_model
from tests.hub_server import HubServer
from tests.paths import REPO

NEMO_FIXTURES = REPO / "tests" / "fixtures" / "nemo"
WHISPER_REPO = ALIASES["tiny.en"]
NEMO_REPO = "nvidia/stt_en_tiny_test"
UNLOADED = {"README.md": b"# a model card\n", "flax_model.msgpack": b"\0" * 4096, "vocabulary.txt": b"a\nb\n"}
"""Files a repo carries that no family loads: never downloaded."""


@pytest.fixture(scope="module")
def hub() -> Iterator[HubServer]:
    server = HubServer()
    server.add_dir(WHISPER_REPO, Path(embedded_checkpoint_dir()), extra=UNLOADED)
    server.add_commit(NEMO_REPO, {"model.nemo": (NEMO_FIXTURES / "ctc_striding_bn" / "model.nemo").read_bytes()},
                      refs=("v1",))
    server.add_commit(NEMO_REPO, {"model.nemo": (NEMO_FIXTURES / "tdt" / "model.nemo").read_bytes(),
                                  "README.md": b"tdt\n"})
    server.start()
    yield server
    server.close()


@pytest.fixture
def hub_env(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HubServer:
    """HF_ENDPOINT at the local hub, a fresh cache per test, online."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return hub


class RecordingBar(tqdm):  # type: ignore[misc]
    """A real tqdm bar (to a discarded stream); every bar made is kept, to read where it got to
    (huggingface_hub may leave closing a bar to garbage collection)."""

    bars: ClassVar[list[RecordingBar]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["file"] = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the bar
        super().__init__(*args, **kwargs)
        RecordingBar.bars.append(self)


def _new_downloads(hub: HubServer, before: int) -> list[str]:
    return [p.rsplit("/", 1)[-1] for p in hub.downloads()[before:]]


def test_alias_downloads_only_loaded_files_with_progress_then_reuses_the_cache(hub_env: HubServer) -> None:
    RecordingBar.bars.clear()
    before = len(hub_env.downloads())
    model = resolve_model("tiny.en", progress=RecordingBar)
    assert model.ref.repo_id == WHISPER_REPO and model.ref.alias == "tiny.en"
    assert model.family == "whisper"
    fetched = sorted(_new_downloads(hub_env, before))
    assert fetched == ["config.json", "model.bin", "tokenizer.json"]  # no README, Flax weights or vocabulary
    assert sorted(p.name for p in Path(model.path).iterdir()) == fetched
    for name in fetched:
        assert (Path(model.path) / name).read_bytes() == (Path(embedded_checkpoint_dir()) / name).read_bytes()
    total_bytes = sum((Path(model.path) / n).stat().st_size for n in fetched)
    byte_bars = [(bar.total, bar.n) for bar in RecordingBar.bars if bar.unit == "B"]
    assert (total_bytes, total_bytes) in byte_bars  # a byte bar that ran to the end

    requests_before = len(hub_env.requests)
    again = resolve_model(WHISPER_REPO)  # by repo id this time: the same cached snapshot
    assert again.path == model.path
    assert _new_downloads(hub_env, len(hub_env.downloads()) - 0) == []
    assert all("/resolve/" not in path for _, path in hub_env.requests[requests_before:])


def test_offline_uses_the_cache_and_never_the_network(hub_env: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    online = resolve_model("tiny.en")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    requests_before = len(hub_env.requests)
    offline = resolve_model("tiny.en")
    assert offline.path == online.path and offline.family == "whisper"
    with pytest.raises(ModelNotFoundError) as err:  # never downloaded: offline cannot find it
        resolve_model(NEMO_REPO)
    assert NEMO_REPO in str(err.value) and "HF_HUB_OFFLINE" in str(err.value)
    assert f"oasr models pull {NEMO_REPO}" in str(err.value)
    assert hub_env.requests[requests_before:] == []


def test_missing_repo_error_names_it(hub_env: HubServer) -> None:
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("nobody/no-such-model")
    message = str(err.value)
    assert "'nobody/no-such-model' was not found" in message and hub_env.url in message


def test_revision_pin_by_tag_and_commit(hub_env: HubServer) -> None:
    ctc = (NEMO_FIXTURES / "ctc_striding_bn" / "model.nemo").read_bytes()
    tdt = (NEMO_FIXTURES / "tdt" / "model.nemo").read_bytes()
    head = resolve_model(NEMO_REPO)
    pinned = resolve_model(f"{NEMO_REPO}@v1")
    v1_sha = hub_env.repos[NEMO_REPO].refs["v1"]
    by_commit = resolve_model(NEMO_REPO, revision=v1_sha)
    assert head.family == pinned.family == by_commit.family == "nemo"
    assert (Path(head.path) / "model.nemo").read_bytes() == tdt
    assert (Path(pinned.path) / "model.nemo").read_bytes() == ctc
    assert pinned.path == by_commit.path != head.path
    assert Path(pinned.path).name == v1_sha  # the cache's snapshot of exactly that commit
    with pytest.raises(ModelNotFoundError, match="has no revision 'v9'"):
        resolve_model(f"{NEMO_REPO}@v9")


def test_engine_config_takes_a_model_name(hub_env: HubServer) -> None:
    """ASREngine resolves `ckpt_dir` given as a name, detects the family, and transcribes with it."""
    from engine import ASREngine
    from tests.conftest import load_clip

    engine = ASREngine(EngineConfig(ckpt_dir="tiny.en", service_mode="offline", quantization="none"))
    try:
        assert engine.family == "whisper" and Path(engine.config.ckpt_dir or "").is_dir()
        text = engine.transcribe(load_clip("jfk_inaugural"))
        assert "ask not what your country can do for you" in str(text).lower()
    finally:
        engine.shutdown()


def test_names_parse_without_the_network() -> None:
    assert parse_model_name("distil-large-v3") is not None
    assert parse_model_name("org/repo@abc").revision == "abc"  # type: ignore[union-attr]
    assert parse_model_name(embedded_checkpoint_dir()) is None  # a directory stays a directory
    with pytest.raises(CheckpointError, match="pins revision"):
        parse_model_name("org/repo@a", revision="b")
    with pytest.raises(InvalidRequestError, match="not a directory, a known alias"):
        EngineConfig(ckpt_dir="no such thing").validate()
    assert "*.nemo" in hub_patterns() and "model.bin" in hub_patterns()
