"""The job store's database plumbing: one connection used under a lock, one transaction per
store call, and statements written once with `?` placeholders for both dialects.

SQLite serializes writers with `BEGIN IMMEDIATE`; PostgreSQL takes row locks (`FOR UPDATE`, and
`SKIP LOCKED` where replicas claim work side by side). One connection suffices: a replica makes
a few store calls a second. A PostgreSQL connection that broke is reopened on the next call.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from app.jobs.schema import Dialect


class Cursor:
    """A DB-API cursor whose statements are written with `?` placeholders on both dialects."""

    def __init__(self, cur: Any, translate: Callable[[str], str]):
        self._cur = cur
        self._translate = translate

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self._cur.execute(self._translate(sql), params)

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cur.fetchall())

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)


class Database:
    def __init__(self, connect: Callable[[], Any], dialect: Dialect):
        self._connect = connect
        self.dialect = dialect
        self._conn: Any = None
        self._lock = threading.Lock()

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s") if self.dialect.name == "postgresql" else statement

    @property
    def skip_locked(self) -> str:
        """Suffix of a SELECT that claims rows other replicas have not locked (PostgreSQL)."""
        return " FOR UPDATE SKIP LOCKED" if self.dialect.name == "postgresql" else ""

    @property
    def for_update(self) -> str:
        """Suffix of a SELECT that locks the rows it reads until the transaction ends (PostgreSQL)."""
        return " FOR UPDATE" if self.dialect.name == "postgresql" else ""

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One transaction; writers are serialized on SQLite (BEGIN IMMEDIATE)."""
        with self._lock:
            if self._conn is None or getattr(self._conn, "closed", False):
                self._conn = self._connect()
            conn = self._conn
            cur = conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE" if self.dialect.name == "sqlite" else "BEGIN")
                yield Cursor(cur, self._sql)
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    cur.execute("ROLLBACK")
                if self.dialect.name == "postgresql" and getattr(conn, "broken", False):
                    self._conn = None  # reconnect on the next call
                raise
            finally:
                with contextlib.suppress(Exception):
                    cur.close()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None


__all__ = ["Cursor", "Database"]
