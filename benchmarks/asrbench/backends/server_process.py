"""A suite-managed OASR server: `uvicorn app.main:app` on free ports, ready-checked, stopped.

Ports come from the OS (bind to port 0); the server reads OASR_* settings from its
environment (app/settings.py), so HTTP is passed as uvicorn's --port and gRPC as
OASR_GRPC_PORT. Its output goes to a log file whose tail is quoted when start-up fails.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.asrbench.backends.base import BackendError
from benchmarks.asrbench.paths import REPO_ROOT

logger = logging.getLogger(__name__)

READY_PATHS = ("/readyz", "/health/ready", "/healthz", "/health", "/v1/models")
"""Probed in order; the first that answers 200 means ready (whichever the server has)."""
STOP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def app_target() -> list[str]:
    """`app.main:app` when the module defines a module-level app, else the create_app factory."""
    main = REPO_ROOT / "app" / "main.py"
    if not main.is_file():
        raise BackendError(f"{main} does not exist yet: the OASR server is not available")
    text = main.read_text()
    if "\napp = " in text or "\napp: " in text:
        return ["app.main:app"]
    return ["--factory", "app.main:create_app"]


class ServerProcess:
    def __init__(self, env: dict[str, str], startup_timeout_s: float) -> None:
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.base_url = f"http://127.0.0.1:{self.http_port}"
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        self._log = Path(tempfile.mkstemp(prefix="asrbench-server-", suffix=".log")[1])
        full_env = {**os.environ, "OASR_GRPC_PORT": str(self.grpc_port), "OASR_PORT": str(self.http_port),
                    "OASR_SHUTDOWN_GRACE_SECS": "2", **env}
        cmd = [sys.executable, "-m", "uvicorn", *app_target(), "--host", "127.0.0.1", "--port",
               str(self.http_port), "--log-level", "warning"]
        logger.info("starting server: %s (grpc %s)", " ".join(cmd), self.grpc_port)
        with self._log.open("w") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
        self.ready_path = self._wait_ready(startup_timeout_s)

    def _tail(self) -> str:
        try:
            return self._log.read_text()[-1500:]
        except OSError:
            return ""

    def _wait_ready(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(base_url=self.base_url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise BackendError(f"server exited with {self.proc.returncode} during start-up:\n{self._tail()}")
                for path in READY_PATHS:
                    try:
                        if client.get(path).status_code == 200:
                            return path
                    except httpx.HTTPError:
                        break  # not listening yet
                time.sleep(0.2)  # polling an external process's readiness: there is nothing to block on
        self.stop()
        raise BackendError(f"server not ready within {timeout_s:.0f} s:\n{self._tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                logger.warning("server did not stop within %.0f s; killing it", STOP_TIMEOUT_S)
                self.proc.kill()
                self.proc.wait()
        self._log.unlink(missing_ok=True)
