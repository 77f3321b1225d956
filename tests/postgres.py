"""A throwaway PostgreSQL server for tests: `initdb` + `pg_ctl` in a temporary directory on a
free loopback port, from Debian's `postgresql` package (`make system-deps` installs it).

PostgreSQL refuses to run as root, so under root the server runs as the package's `postgres`
user (`runuser`). Tests that need it skip, naming the package, only when the binaries are absent.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

SKIP_REASON = ("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's `postgresql` "
               "(`make system-deps` does, as root)")


def pg_bin_dir() -> Path | None:
    """Folder holding initdb and pg_ctl: on PATH, else the newest /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="oasr-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._prefix: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no `postgres` user to run PostgreSQL as")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._prefix = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self._prefix, *args], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")

    def start(self) -> None:
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "oasr", "--auth=trust",
                  "-E", "UTF8", "--no-sync")
        self._start()

    def _start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "start")

    def stop_fast(self) -> None:
        """Stop the server as an operator's restart does ('fast': open connections are
        terminated); `start_again` brings it back on the same port with the same data."""
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def start_again(self) -> None:
        self._start()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://oasr@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        pytest.skip(SKIP_REASON)
    server = PostgresServer(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()
