"""Every marked example in README.md and docs/ runs against a real server (see doc_blocks.py).

One server for the module: the embedded model in streaming mode (live partials), uploads and
gRPC work the same there. Each block runs as a reader would run it, with the addresses
rewritten to this server and `speech.flac` (a dev clip) in its working folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Clip, manifest
from tests.docs.doc_blocks import Block, all_blocks, blocks
from tests.e2e.conftest import ServerProcess, start_server

CLIP_ID = "libri_61-70968-0000"  # the repository's own speech.flac is this clip
SAMPLE = Path(__file__).resolve().parents[2] / "speech.flac"
BLOCK_TIMEOUT_S = 180
MIN_WORDS_HEARD = 0.85  # share of the reference's words a transcript example must print

BLOCKS = all_blocks()


def test_the_shipped_sample_is_the_dev_clip_whose_transcript_the_examples_expect() -> None:
    assert SAMPLE.read_bytes() == _clip().path.read_bytes()


def _clip() -> Clip:
    for c in manifest():
        if c.id == CLIP_ID:
            return c
    pytest.skip(f"dev clip {CLIP_ID} not found")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("docs"), {"OASR_SERVICE_MODE": "streaming"})
    yield srv
    srv.terminate()


def localize(code: str, server: ServerProcess) -> str:
    return (code.replace("http://localhost:8000", server.base_url)
                .replace("ws://localhost:8000", server.ws_url)
                .replace("localhost:50051", server.grpc_target))


def _words(text: str) -> list[str]:
    # Plain lower-case words: the output may be JSON, SRT or SSE around the transcript.
    return re.findall(r"[a-z']+", text.lower())


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_example_runs(block: Block, server: ServerProcess, tmp_path: Path) -> None:
    if block.needs and shutil.which(block.needs) is None:
        pytest.skip(f"{block.needs} is not installed")
    clip = _clip()
    (tmp_path / "speech.flac").symlink_to(SAMPLE)  # the sample the README's commands use
    code = localize(block.code, server)
    argv = ["bash", "-eo", "pipefail", "-c", code] if block.lang == "bash" else [sys.executable, "-c", code]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("OASR_API_KEY", None)
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=BLOCK_TIMEOUT_S)
    out, err = result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
    assert result.returncode == 0, f"{block.id} exited {result.returncode}\n--- code\n{code}\n--- stdout\n{out}\n--- stderr\n{err}"
    if block.expect_transcript:
        assert clip.text is not None
        reference, printed = _words(clip.text), set(_words(out))
        heard = sum(w in printed for w in reference) / len(reference)
        assert heard >= MIN_WORDS_HEARD, f"{block.id} printed {out!r}, expected the words of {clip.text!r}"


def test_api_reference_runs_every_kind_of_client() -> None:
    tested = "\n".join(b.code for b in blocks("docs/api.md"))
    for client in ("curl ", "from openai import OpenAI", "speech_pb2_grpc", "import websockets",
                   "/v1/speech:recognize", "grpc_health", "/v1/models", "/metrics", "stream=true",
                   "AsyncDeepgramClient"):
        assert client in tested, f"docs/api.md has no tested example using {client!r}"


def test_readme_quick_start_is_the_two_make_commands() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make \w+)", quick, flags=re.M)
    assert commands == ["make serve", "make test"], commands
