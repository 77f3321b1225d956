"""Run directories and their raw records.

    <results_root>/<run_id>/
        run.json          environment, resolved profile, backend options, per-kind status
        requests.jsonl    one line per request (warm-up included, flagged by `phase`)
        sessions.jsonl    one line per streaming session
        resources.jsonl   CPU/RSS samples from the out-of-process monitor
        summary.json      derived from the above only (`recompute` checks that)
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import threading
import uuid
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from benchmarks.asrbench.paths import REPO_ROOT, results_root

PACKAGES = ("numpy", "torch", "faster-whisper", "ctranslate2", "fastapi", "uvicorn", "grpcio", "httpx",
            "websockets", "jiwer", "whisper-normalizer", "psutil", "oasr")
BASELINES = "baselines"


class RunNotFoundError(LookupError):
    pass


class Recorder:
    """Appends raw records as they happen (thread-safe), so a crashed run keeps what it measured."""

    def __init__(self, run_dir: Path, stamp: dict[str, Any] | None = None) -> None:
        """`stamp` is merged into every record (the mock backend's `simulated: true`)."""
        self.run_dir = run_dir
        self._stamp = stamp or {}
        self._lock = threading.Lock()
        self._files = {name: (run_dir / f"{name}.jsonl").open("a") for name in ("requests", "sessions")}

    def _write(self, name: str, record: dict[str, Any]) -> None:
        line = json.dumps({**record, **self._stamp}, sort_keys=True)
        with self._lock:
            self._files[name].write(line + "\n")
            self._files[name].flush()

    def request(self, record: dict[str, Any]) -> None:
        self._write("requests", record)

    def session(self, record: dict[str, Any]) -> None:
        self._write("sessions", record)

    def close(self) -> None:
        for f in self._files.values():
            f.close()


def new_run_dir(profile: str, label: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "-", label).strip("-")
    run_dir = results_root() / f"{stamp}-{profile}-{safe}-{uuid.uuid4().hex[:4]}"
    run_dir.mkdir(parents=True)
    return run_dir


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_run(run_dir: Path) -> dict[str, Any]:
    """run.json plus the raw records, as one dict."""
    meta: dict[str, Any] = json.loads((run_dir / "run.json").read_text())
    return {
        "dir": str(run_dir),
        "meta": meta,
        "requests": read_jsonl(run_dir / "requests.jsonl"),
        "sessions": read_jsonl(run_dir / "sessions.jsonl"),
        "resources": read_jsonl(run_dir / "resources.jsonl"),
    }


def resolve_run(ref: str) -> Path:
    """A run by path, by id under the results root, by baseline name, or `latest`."""
    root = results_root()
    candidates = [Path(ref), root / ref, root / BASELINES / ref]
    for cand in candidates:
        if (cand / "run.json").is_file():
            return cand
    runs = list_runs()
    if ref == "latest" and runs:
        return runs[-1]
    matches = [r for r in runs if r.name.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    raise RunNotFoundError(f"no run {ref!r} (looked under {root}; {len(matches)} prefix matches)")


def list_runs() -> list[Path]:
    root = results_root()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "run.json").is_file())


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    status = _git("status", "--porcelain")
    return {
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "cpu_model": _cpu_model(),
        "cpu_logical": os.cpu_count(),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_total_mb": round(psutil.virtual_memory().total / 2**20),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
        "hostname": platform.node(),
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("ASRBENCH_", "OASR_", "OMP_", "MKL_", "CT2_"))},
    }
