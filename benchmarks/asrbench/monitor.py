"""Out-of-process resource monitor: samples CPU% and RSS of the benchmark and server processes.

It runs as its own process so sampling never steals the GIL from the measured client.
Each line of resources.jsonl: {"t": perf_counter seconds (CLOCK_MONOTONIC, shared by all
processes on the host), "role": ..., "pid": ..., "cpu_pct": ..., "rss_mb": ..., "procs": n}.
CPU% and RSS are summed over the process and its children (a server's workers count).
Role "host" is the whole machine (CPU% of all cores, memory in use, 1-min load average), so
contention from other processes shows in the record.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import psutil

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.25


class Monitor:
    """Handle on a monitor subprocess; `stop()` ends it and waits for its last line."""

    def __init__(self, out: Path, pids: dict[str, int], interval_s: float = DEFAULT_INTERVAL_S) -> None:
        args = [sys.executable, "-m", "benchmarks.asrbench.monitor", "--out", str(out),
                "--interval", str(interval_s)]
        for role, pid in pids.items():
            args += ["--pid", f"{role}={pid}"]
        self._proc = subprocess.Popen(args)

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _exclusive_trees(roots: dict[str, psutil.Process]) -> dict[str, list[psutil.Process]]:
    """Each role's process tree, minus the trees of roles nested in it (the server, though a
    child of the benchmark process, is not the benchmark's CPU) and minus this monitor."""
    trees = {role: _tree(root) for role, root in roots.items()}
    me = os.getpid()
    out = {}
    for role, tree in trees.items():
        pids = {p.pid for p in tree}
        nested = {p.pid for other, t in trees.items()
                  if other != role and roots[other].pid != roots[role].pid and roots[other].pid in pids for p in t}
        out[role] = [p for p in tree if p.pid not in nested and p.pid != me]
    return out


def run(out: Path, pids: dict[str, int], interval_s: float) -> None:
    stop = False

    def _on_term(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _on_term)
    roots = {role: psutil.Process(pid) for role, pid in pids.items()}
    known: dict[int, psutil.Process] = {}
    with out.open("a") as f:
        while not stop:
            for role, tree in _exclusive_trees(roots).items():
                cpu = rss = 0.0
                procs = 0
                for p in tree:
                    # cpu_percent needs the same Process object across calls to measure an interval.
                    p = known.setdefault(p.pid, p)
                    try:
                        cpu += p.cpu_percent(None)
                        rss += p.memory_info().rss
                        procs += 1
                    except psutil.NoSuchProcess:
                        known.pop(p.pid, None)
                if procs:
                    f.write(json.dumps({"t": time.perf_counter(), "role": role, "pid": roots[role].pid,
                                        "cpu_pct": round(cpu, 1), "rss_mb": round(rss / 2**20, 1),
                                        "procs": procs}) + "\n")
            # Whole-host CPU, so contention from other processes is visible in the record.
            f.write(json.dumps({"t": time.perf_counter(), "role": "host", "pid": 0,
                                "cpu_pct": psutil.cpu_percent(None), "rss_mb": round(
                                    (psutil.virtual_memory().total - psutil.virtual_memory().available) / 2**20, 1),
                                "procs": 0, "loadavg1": round(psutil.getloadavg()[0], 2)}) + "\n")
            f.flush()
            if not any(r.is_running() for r in roots.values()):
                return
            time.sleep(interval_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Sample CPU/RSS of processes into a JSONL file.")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between samples")
    parser.add_argument("--pid", action="append", default=[], help="role=pid (repeatable)")
    args = parser.parse_args(argv)
    pids = {}
    for spec in args.pid:
        role, _, pid = spec.partition("=")
        pids[role] = int(pid)
    try:
        run(args.out, pids, args.interval)
    except psutil.NoSuchProcess as exc:
        logger.warning("monitored process is gone: %s", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
