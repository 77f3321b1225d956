"""`audio.uri` for jobs: `file://` paths under one configured directory, nothing else.

The server never fetches anything from the network; a `file://` URI is resolved with every
symlink and `..` followed, and must land on a regular file inside `--audio-uri-root`. The
check runs at submission and again when the job runs (the file may have been replaced).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from app.jobs.errors import InvalidJobError


def resolve_audio_uri(uri: str, root: str | None) -> Path:
    if not root:
        raise InvalidJobError("audio.uri is disabled on this server (no --audio-uri-root); send the audio "
                              "bytes in audio.content")
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise InvalidJobError(f"audio.uri must be a file:// URI under the server's --audio-uri-root; "
                              f"{parts.scheme or 'a bare path'}:// is not fetched (the server fetches nothing)")
    if parts.netloc not in ("", "localhost"):
        raise InvalidJobError(f"audio.uri names host {parts.netloc!r}; only local file:///path URIs are served")
    path = Path(unquote(parts.path))
    if not path.is_absolute():
        raise InvalidJobError("audio.uri must be an absolute file:///path")
    base = Path(root).resolve()
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, RuntimeError, OSError):
        resolved = None
    if resolved is None or not resolved.is_relative_to(base):
        # one message for "missing" and "outside": the answer must not probe the file system
        raise InvalidJobError(f"audio.uri {uri!r} is not a file under the server's --audio-uri-root")
    if not resolved.is_file():
        raise InvalidJobError(f"audio.uri {uri!r} is not a regular file")
    return resolved
