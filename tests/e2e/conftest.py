"""End-to-end fixtures: a real `uvicorn --factory app.main:create_app` subprocess on free ports, the real engine
and model. Servers are started once per module (model load + warm-up take a few seconds)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.ports import free_ports

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    return free_ports(1)[0]


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    grpc_port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


SERVER_APP = ("--factory", "app.main:create_app")
"""How the server is started (`make serve`, the image); `("app.main:app",)` is the older spelling."""


def start_server(tmp_dir: Path, env: dict[str, str] | None = None, ready_timeout: float = 120.0,
                 port: int | None = None, app: tuple[str, ...] = SERVER_APP) -> ServerProcess:
    """Start uvicorn on `app` with OASR_* settings from `env` (on `port`, e.g. to restart a
    killed server where its clients reconnect); wait until /readyz is 200."""
    if port is None:
        port, grpc_port = free_ports(2)
    else:  # a restart on the port its clients reconnect to
        grpc_port = free_ports(1, avoid=(port,))[0]
    full_env = {**os.environ, "OASR_GRPC_PORT": str(grpc_port), "OASR_LOG_LEVEL": "info",
                "OASR_DATA_DIR": str(tmp_dir / f"data-{port}"),  # jobs store: never the user's data dir
                # float32 unless the test names another path: 'auto' is int8 on a VNNI/AMX CPU only
                "OASR_QUANTIZATION": "none",
                **(env or {})}
    log_path = tmp_dir / f"server-{port}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - handed to the child for its lifetime
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", *app, "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT,
    )
    server = ServerProcess(proc, port, grpc_port, log_path)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.base_url}/readyz", timeout=1.0).status_code == 200:
                return server
        time.sleep(0.3)
    server.terminate()
    raise RuntimeError(f"server not ready after {ready_timeout}s:\n{server.log()[-3000:]}")


def start_wenet_streaming_server(tmp_dir: Path) -> ServerProcess:
    """A streaming server on a cache-aware WeNet Conformer-CTC checkpoint: the random-init one
    `engine.models.wenet.testing` writes in the real on-disk format (no real WeNet weights can be
    fetched here), so the engine, its paged KV pool and the server are real and the transcripts
    meaningless."""
    from engine.models.wenet.testing import write_checkpoint

    ckpt = write_checkpoint(str(tmp_dir / "ckpt"))
    # WeNet experiment dirs hold final.pt and avg.pt; with two .pt files the Whisper loader
    # (which claims a dir with a single .pt) does not mistake the dir for an OpenAI checkpoint.
    shutil.copy(f"{ckpt}/final.pt", f"{ckpt}/avg.pt")
    return start_server(tmp_dir, env={"OASR_CKPT_DIR": ckpt, "OASR_SERVICE_MODE": "streaming"})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A default server (embedded model, offline mode) shared by a test module."""
    srv = start_server(tmp_path_factory.mktemp("server"))
    yield srv
    srv.terminate()
