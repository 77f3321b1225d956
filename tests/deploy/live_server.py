"""Start the real server the way the image does (`uvicorn --factory app.main:create_app`) on free ports.

Used by the deploy checks against a running server and by the browser test. No fakes:
the real engine loads the embedded model; the process gets SIGTERM at the end, as a
pod would.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.deploy.manifests import ROOT
from tests.ports import free_ports

__all__ = ["LiveServer", "start_server"]

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 180.0  # model load on a busy 2-core CI machine
POLL_S = 0.25


@dataclass
class LiveServer:
    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, as Kubernetes and `docker stop` send; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_server(log_path: Path, extra_env: dict[str, str] | None = None, graceful_s: int = 20) -> LiveServer:
    """Run uvicorn like the Dockerfile's CMD and wait until /readyz answers 200."""
    http_port, grpc_port = free_ports(2)
    env = {
        **os.environ,
        "OASR_GRPC_PORT": str(grpc_port),
        "OASR_DEVICE": "cpu",
        "OASR_NUM_THREADS": "2",
        "OASR_DATA_DIR": str(log_path.parent / f"data-{http_port}"),  # jobs store: never the user's data dir
        **(extra_env or {}),
    }
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "app.main:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(http_port),
        "--timeout-graceful-shutdown",
        str(graceful_s),
    ]
    log_file = log_path.open("wb")
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    server = LiveServer(process, http_port, grpc_port, log_path)
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode} before ready:\n{server.log()}")
            try:
                if client.get(f"{server.url}/readyz").status_code == 200:
                    logger.info("server ready on %s (grpc %d)", server.url, grpc_port)
                    return server
            except httpx.TransportError:
                pass
            time.sleep(POLL_S)  # polling an external process's port: nothing to block on
    server.stop()
    raise RuntimeError(f"server not ready after {READY_TIMEOUT_S:.0f} s:\n{server.log()}")
