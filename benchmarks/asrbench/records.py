"""Run directories and their raw records.

    <results root>/<YYYYmmdd-HHMMSS>_<profile>_<backend>_<run-id>/
        run.json          schema and suite versions, environment, resolved profile, backend
                          options and info, workloads, per-benchmark status
        requests.jsonl    one line per request (warm-up included, flagged by `phase`)
        sessions.jsonl    one line per streaming session
        resources.jsonl   CPU/RSS samples from the out-of-process monitor
        workloads/*.json  every resolved workload, item by item
        summary.json      derived from the above only (`recompute` checks that)
    <results root>/validation/<stamp>_<backend>_<id>/   validate output
    <results root>/baselines/<name>/                    save-baseline copies

A command that reads a run takes a directory path, a directory name under the results
root, a run id as `runs` prints it (or a unique prefix), a baseline name, or `latest`.
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

from benchmarks.asrbench.errors import RunNotFoundError as RunNotFoundError
from benchmarks.asrbench.paths import REPO_ROOT, results_root

PACKAGES = ("numpy", "torch", "faster-whisper", "ctranslate2", "transformers", "pywhispercpp", "fastapi", "uvicorn",
            "grpcio", "httpx", "websockets", "jiwer", "whisper-normalizer", "psutil", "oasr")
BASELINES = "baselines"
VALIDATION = "validation"




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


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "-", text).strip("-")


def new_run_dir(profile: str, label: str, parent: Path | None = None) -> tuple[Path, str]:
    """(directory, run id): `<YYYYmmdd-HHMMSS>_<profile>_<backend>_<run-id>` under the results root."""
    run_id = uuid.uuid4().hex[:8]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = (parent or results_root()) / f"{stamp}_{_safe(profile)}_{_safe(label)}_{run_id}"
    run_dir.mkdir(parents=True)
    return run_dir, run_id


def new_validation_dir(backend: str) -> tuple[Path, str]:
    vid = uuid.uuid4().hex[:8]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = results_root() / VALIDATION / f"{stamp}_{_safe(backend)}_{vid}"
    out.mkdir(parents=True)
    return out, vid


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


RECORD_FILES = ("run.json", "validation.json")


def _is_record(path: Path) -> bool:
    return any((path / f).is_file() for f in RECORD_FILES)


def resolve_run(ref: str) -> Path:
    """A run or validation by path, by directory name, by id (or unique prefix), by baseline
    name, or `latest`."""
    root = results_root()
    for cand in (Path(ref).expanduser(), root / ref, root / BASELINES / ref, root / VALIDATION / ref):
        if _is_record(cand):
            return cand
    runs = list_runs()
    if ref == "latest" and runs:
        return runs[0]
    pool = runs + list_validations()
    matches = [r for r in pool if r.name.rsplit("_", 1)[-1].startswith(ref) or r.name.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    raise RunNotFoundError(f"no run {ref!r} (looked under {root}; {len(matches)} matches)")


def list_runs() -> list[Path]:
    """Stored runs, newest first (by the directory's time stamp, then by when it was last written)."""
    root = results_root()
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if (p / "run.json").is_file()]
    return sorted(runs, key=lambda p: (p.name.split("_", 1)[0], p.stat().st_mtime), reverse=True)


def list_validations() -> list[Path]:
    root = results_root() / VALIDATION
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if (p / "validation.json").is_file()]
    return sorted(found, key=lambda p: (p.name.split("_", 1)[0], p.stat().st_mtime), reverse=True)


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
                if k.startswith(("ASRBENCH_", "OASR_", "OMP_", "MKL_", "CT2_"))
                or k in ("CKPT_DIR", "WHISPER_CKPT", "LJSPEECH_DIR", "AUDIO_DIR", "WAV_DIR")},
    }
