"""Opening the job store: SQLite in the data dir by default, PostgreSQL for shared replicas.

    unset                      sqlite at <data dir>/jobs.sqlite3 (WAL)
    sqlite:///abs/path.db      sqlite at that path
    postgresql://user@host/db  PostgreSQL through psycopg 3 (also postgres://)
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import sqlite3
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from app.jobs.schema import POSTGRES, SQLITE
from app.jobs.store import SqlJobStore

logger = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another process's transaction on the same SQLite file."""


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=SQLITE_BUSY_TIMEOUT_S)
    conn.execute("PRAGMA journal_mode=WAL")
    # FULL: a committed claim or result survives power loss too, not only a killed process.
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _postgres_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=10)


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def open_store(url: str | None, data_dir: Path) -> SqlJobStore:
    """The store `url` names (see the module docstring); not yet migrated."""
    if not url:
        path = data_dir / "jobs.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True)
        return SqlJobStore(lambda: _sqlite_connect(path), SQLITE, describe=str(path))
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        path = Path(urlsplit(url).path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return SqlJobStore(lambda: _sqlite_connect(path), SQLITE, describe=str(path))
    if scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"):
        dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
        return SqlJobStore(lambda: _postgres_connect(dsn), POSTGRES, describe=_redacted(url))
    raise ValueError(f"jobs_database_url must be sqlite:///path or postgresql://..., got scheme {scheme!r}")


class DataDirLock:
    """An exclusive lock on the data dir (flock), held for the server's life. Holding it means
    no other server uses this SQLite store, so jobs left RUNNING were this server's before a
    crash and can be taken over at once instead of after their lease."""

    def __init__(self, data_dir: Path):
        self._path = data_dir / "jobs.lock"
        self._file: IO[str] | None = None

    def acquire(self) -> bool:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self._path, "a")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        self._file = f
        return True

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
