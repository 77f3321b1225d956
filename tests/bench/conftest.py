from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.asrbench import runner
from benchmarks.asrbench.paths import DEV_MANIFEST


@pytest.fixture(scope="session")
def bench_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Results and datasets in a temp dir, never in the user's data dir or the checkout."""
    root = tmp_path_factory.mktemp("asrbench")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASRBENCH_RESULTS_DIR", str(root / "results"))
        mp.setenv("ASRBENCH_DATA_DIR", str(root / "data"))
        for var in ("ASRBENCH_TEST_STEP_DELAY_MS", "LJSPEECH_DIR", "AUDIO_DIR", "WAV_DIR", "CKPT_DIR", "WHISPER_CKPT"):
            mp.delenv(var, raising=False)
        yield root


@pytest.fixture
def fresh_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty data and results directories of this test alone."""
    monkeypatch.setenv("ASRBENCH_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("ASRBENCH_DATA_DIR", str(tmp_path / "data"))
    for var in ("LJSPEECH_DIR", "AUDIO_DIR", "WAV_DIR", "CKPT_DIR", "WHISPER_CKPT", "ASRBENCH_TEST_STEP_DELAY_MS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


@pytest.fixture(scope="session")
def dev_data() -> None:
    assert DEV_MANIFEST.is_file(), f"shared speech data not present at {DEV_MANIFEST}"


@pytest.fixture(scope="session")
def selftest_run(bench_dirs: Path) -> Path:
    return runner.run("selftest", "mock", [])


@pytest.fixture(scope="session")
def slowed_run(bench_dirs: Path) -> Iterator[Path]:
    """The same workload with every simulated engine step slowed by 40 ms."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASRBENCH_TEST_STEP_DELAY_MS", "40")
        yield runner.run("selftest", "mock", [])


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(directory, base URL) of a local HTTP server: the download path without the internet."""
    served = tmp_path / "served"
    served.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
