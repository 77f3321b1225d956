"""The shared download helper (mirrors, `.part` files, MD5/SHA-256 verification) and safe
archive extraction. Only `prepare ... --download` reaches this module."""

from __future__ import annotations

import hashlib
import logging
import tarfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.asrbench.errors import DownloadError as DownloadError

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
CONNECT_TIMEOUT_S = 15.0
READ_TIMEOUT_S = 60.0




def _verify(path: Path, md5: str | None, sha256: str | None) -> str | None:
    """None when the file matches the given checksums, else what differs."""
    digests = {"md5": hashlib.md5(usedforsecurity=False), "sha256": hashlib.sha256()}
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK_BYTES), b""):
            for d in digests.values():
                d.update(block)
    for algo, expected in (("md5", md5), ("sha256", sha256)):
        if expected and digests[algo].hexdigest() != expected.lower():
            return f"{algo} {digests[algo].hexdigest()} != expected {expected}"
    return None


def download(urls: Sequence[str], dest: Path, *, md5: str | None = None, sha256: str | None = None,
             headers: dict[str, str] | None = None) -> Path:
    """Fetch `dest` from the first mirror that delivers a file with the expected checksum.

    The body streams into `dest.part`, renamed only once verified, so an interrupted or
    corrupt transfer never leaves a file that looks complete. An existing `dest` that
    verifies is kept without a request.
    """
    if not md5 and not sha256:
        raise ValueError("download() needs an md5 or sha256 to verify against")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file() and _verify(dest, md5, sha256) is None:
        logger.info("%s already present and verified", dest)
        return dest
    import httpx

    part = dest.with_name(dest.name + ".part")
    failures = []
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    for url in urls:
        logger.info("downloading %s", url)
        try:
            with httpx.stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as resp:
                resp.raise_for_status()
                with part.open("wb") as f:
                    for block in resp.iter_bytes(CHUNK_BYTES):
                        f.write(block)
        except (httpx.HTTPError, OSError) as exc:
            failures.append(f"{url}: {type(exc).__name__}: {exc}")
            part.unlink(missing_ok=True)
            continue
        mismatch = _verify(part, md5, sha256)
        if mismatch:
            failures.append(f"{url}: checksum mismatch ({mismatch})")
            part.unlink(missing_ok=True)
            continue
        part.replace(dest)
        return dest
    raise DownloadError(f"could not download {dest.name}:\n  " + "\n  ".join(failures))


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a tar archive, refusing absolute paths, `..` components and any link or
    device member: a hostile archive cannot write outside `dest`."""
    dest = dest.resolve()
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for m in members:
            target = (dest / m.name).resolve()
            if m.name.startswith("/") or ".." in Path(m.name).parts or not target.is_relative_to(dest):
                raise DownloadError(f"{archive.name}: member {m.name!r} would extract outside {dest}")
            if not (m.isfile() or m.isdir()):
                raise DownloadError(f"{archive.name}: member {m.name!r} is a link or special file; refused")
        tar.extractall(dest, members=members, filter="data")
