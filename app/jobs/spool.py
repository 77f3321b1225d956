"""The audio spool: uploaded audio of queued and finished jobs, one file per distinct content.

Files are named by their sha256 (`<root>/<first two hex>/<digest>`), so two jobs with the same
audio share one file; the store counts the references and removes the file with the last job
(see `SqlJobStore.create` / `delete`). A file appears atomically (written under a temporary
name, fsynced, renamed), so a crash never leaves a truncated file under a digest's name, and a
full disk (ENOSPC, EDQUOT) raises StorageFull with the partial temporary file removed.
Replicas sharing one database must share the spool directory too (a shared volume).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from pathlib import Path

from app.jobs.errors import StorageFull

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Spool:
    def __init__(self, root: Path):
        self.root = root
        self._tmp = root / "tmp"
        self._tmp.mkdir(parents=True, exist_ok=True)
        for leftover in self._tmp.iterdir():  # a crash between write and rename; never referenced
            with contextlib.suppress(OSError):
                leftover.unlink()

    def path(self, digest: str) -> Path:
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise ValueError(f"not a sha256 digest: {digest!r}")
        return self.root / digest[:2] / digest

    def place(self, digest: str, data: bytes) -> None:
        """Make `path(digest)` hold `data` (no-op when it already does)."""
        final = self.path(digest)
        if final.exists():
            return
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._tmp, prefix=digest[:16] + ".")
        except OSError as exc:
            if exc.errno in DISK_FULL_ERRNOS:
                raise self._full(exc, len(data)) from exc
            raise
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
                raise self._full(exc, len(data)) from exc
            raise

    def _full(self, exc: OSError, size: int) -> StorageFull:
        return StorageFull(f"the job spool's disk is full ({os.strerror(exc.errno or errno.ENOSPC)} writing "
                           f"{size / 2**20:.1f} MiB under {self.root}); nothing was stored: retry later, or send "
                           "an audio.uri")

    def remove(self, digest: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(digest).unlink()

    def read(self, digest: str) -> bytes:
        return self.path(digest).read_bytes()

    def files(self) -> list[Path]:
        """Every spooled file (for tests and audits)."""
        return sorted(p for p in self.root.glob("??/*") if p.is_file())

    def temporary_files(self) -> list[Path]:
        return sorted(self._tmp.iterdir())
