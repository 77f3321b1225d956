"""Must-show 1 of issue 35: the same config on the same machine gives byte-identical transcripts
at every start, and under any load. The server is started twice on the default config: once on a
quiet machine, once with every core held by a busy loop while it starts (where a start-up timing
would have decided 'auto' quantization the other way); both transcribe the same dev clips."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import manifest, require_speech_data
from tests.e2e.conftest import ServerProcess, start_server

AUTO = {"OASR_QUANTIZATION": "auto"}  # the default config: what this test is about (others pin a path)
CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "ps_cards_005", "jfk_inaugural")  # short, ~30 s of speech in all


@contextmanager
def busy_cores() -> Iterator[None]:
    """One spinning Python process per core until the block ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def transcribe_all(server: ServerProcess) -> tuple[dict[str, object], dict[str, str]]:
    """The server's model info and each clip's transcript, as the server sent it."""
    info = httpx.get(f"{server.base_url}/v1/models", timeout=30).json()["data"][0]["info"]
    texts = {}
    for clip in (c for c in manifest() if c.id in CLIPS):
        r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", timeout=300,
                       files={"file": (clip.path.name, clip.path.read_bytes())}, data={"response_format": "text"})
        assert r.status_code == 200, r.text
        texts[clip.id] = r.text
    return info, texts


@pytest.mark.slow
def test_two_starts_one_under_load_give_byte_identical_transcripts(tmp_path: Path) -> None:
    require_speech_data()
    runs = []
    for loaded in (False, True):
        if loaded:
            with busy_cores():
                server = start_server(tmp_path, env=AUTO)
        else:
            server = start_server(tmp_path, env=AUTO)
        try:
            runs.append(transcribe_all(server))
            log = server.log()
        finally:
            server.terminate()
        assert "quantization auto -> " in log  # the decision is logged at load
    (quiet_info, quiet), (loaded_info, loaded_texts) = runs
    assert len(quiet) == len(CLIPS) and all(quiet.values())
    decision = ("quantization", "quantization_reason")
    assert [quiet_info[k] for k in decision] == [loaded_info[k] for k in decision]
    assert quiet_info["quantization_reason"]  # /v1/models says why
    assert loaded_texts == quiet  # byte for byte
