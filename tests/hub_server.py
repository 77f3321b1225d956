"""A Hugging Face Hub-shaped HTTP server on 127.0.0.1 for tests: the few endpoints
`huggingface_hub.snapshot_download` calls, serving repos held in memory, and a log of every
request so a test can tell a download from a cache hit.

Endpoints (as huggingface_hub 1.x/2.x requests them):
- `GET /api/models/{repo}/revision/{rev}`: repo info; `sha` is the commit `rev` names.
- `GET /api/models/{repo}/tree/{rev}`: the commit's files (path, size, git blob id).
- `HEAD|GET /{repo}/resolve/{rev}/{path}`: a file, with `X-Repo-Commit` and `ETag` headers.
A missing repo answers 404 with `X-Error-Code: RepoNotFound`, a missing revision
`X-Error-Code: RevisionNotFound`, as the Hub does (huggingface_hub maps these to its errors).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob: what the Hub reports as a small file's `oid` and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    sha: str
    files: dict[str, bytes]


@dataclass
class Repo:
    commits: list[Commit] = field(default_factory=list)
    refs: dict[str, str] = field(default_factory=dict)
    """Branch and tag names -> commit sha."""

    def find(self, revision: str) -> Commit | None:
        sha = self.refs.get(revision, revision)
        return next((c for c in self.commits if c.sha == sha), None)


class HubServer:
    """In-memory repos served over HTTP; `url` goes into HF_ENDPOINT."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request served, in order."""
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="hub-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add_commit(self, repo_id: str, files: dict[str, bytes], refs: tuple[str, ...] = ("main",)) -> str:
        """Add a commit holding exactly `files` and point `refs` at it; its sha."""
        repo = self.repos.setdefault(repo_id, Repo())
        sha = hashlib.sha1(f"{repo_id}:{len(repo.commits)}".encode()).hexdigest()
        repo.commits.append(Commit(sha, dict(files)))
        for ref in refs:
            repo.refs[ref] = sha
        return sha

    def add_dir(self, repo_id: str, directory: Path, extra: dict[str, bytes] | None = None,
                refs: tuple[str, ...] = ("main",)) -> str:
        files = {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*"))
                 if p.is_file()}
        return self.add_commit(repo_id, {**files, **(extra or {})}, refs)

    def downloads(self) -> list[str]:
        """Paths of files sent with a body (GET on /resolve/)."""
        with self._lock:
            return [path for method, path in self.requests if method == "GET" and "/resolve/" in path]

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ---- request handling (called on the server's threads) ----

    def _record(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))

    def _split_repo(self, rest: str) -> tuple[Repo | None, str, str]:
        """'owner/name/<tail>' -> (repo, repo id, tail); the repo id is the longest known prefix."""
        parts = rest.split("/")
        for n in (2, 1):
            repo_id = "/".join(parts[:n])
            if repo_id in self.repos:
                return self.repos[repo_id], repo_id, "/".join(parts[n:])
        return None, "/".join(parts[:2]), "/".join(parts[2:])


def _handler_for(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet: the hub logs to hub.requests
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _send(self, status: int, payload: bytes, headers: dict[str, str], body: bool) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if body:
                self.wfile.write(payload)

        def _error(self, code: str, message: str, body: bool) -> None:
            payload = json.dumps({"error": message}).encode()
            self._send(404, payload, {"Content-Type": "application/json", "X-Error-Code": code,
                                      "X-Error-Message": message}, body)

        def _json(self, value: object, body: bool) -> None:
            self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"}, body)

        def _serve(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub._record(self.command, path)
            if path.startswith("/api/models/"):
                self._api(path.removeprefix("/api/models/"), body)
            else:
                self._resolve(path.removeprefix("/"), body)

        def _commit(self, repo: Repo | None, repo_id: str, revision: str, body: bool) -> Commit | None:
            if repo is None:
                self._error("RepoNotFound", f"Repository not found: {repo_id}", body)
                return None
            commit = repo.find(revision)
            if commit is None:
                self._error("RevisionNotFound", f"Invalid rev id: {revision}", body)
            return commit

        def _api(self, rest: str, body: bool) -> None:
            repo, repo_id, tail = hub._split_repo(rest)
            kind, _, revision = tail.partition("/")
            if kind not in ("revision", "tree"):
                return self._error("EntryNotFound", f"unknown endpoint {tail!r}", body)
            commit = self._commit(repo, repo_id, revision or "main", body)
            if commit is None:
                return None
            if kind == "revision":
                return self._json({"id": repo_id, "modelId": repo_id, "sha": commit.sha, "private": False,
                                   "siblings": [{"rfilename": name} for name in sorted(commit.files)]}, body)
            return self._json([{"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
                               for name, data in sorted(commit.files.items())], body)

        def _resolve(self, rest: str, body: bool) -> None:
            repo, repo_id, tail = hub._split_repo(rest)
            marker, _, tail = tail.partition("/")
            revision, _, filename = tail.partition("/")
            if marker != "resolve":
                return self._error("EntryNotFound", f"unknown path {rest!r}", body)
            commit = self._commit(repo, repo_id, revision, body)
            if commit is None:
                return None
            if filename not in commit.files:
                return self._error("EntryNotFound", f"{filename} not in {repo_id}@{revision}", body)
            data = commit.files[filename]
            return self._send(200, data, {"Content-Type": "application/octet-stream", "X-Repo-Commit": commit.sha,
                                          "ETag": f'"{git_blob_id(data)}"'}, body)

    return Handler
