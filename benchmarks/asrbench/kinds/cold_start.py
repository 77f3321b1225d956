"""cold_start: a fresh process starts the backend (load model / launch server) and answers one
request. Measured from the spawn, so interpreter start and imports count, as they do for a
user; split into process_ms (spawn -> our code runs), import_ms, start_ms = init_s (model
load or server ready), first_request_ms, then warm_request_ms (the same request again).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.asrbench.kinds.base import KindContext

DEFAULTS: dict[str, Any] = {"repetitions": 1, "timeout_s": 300.0}


def _once(ctx: KindContext, seq: int, timeout_s: float, wav: Path) -> None:
    utt = ctx.utterances(1)[0]
    args = [sys.executable, "-m", "benchmarks.asrbench.coldstart", "--backend", ctx.backend_name,
            "--wav", str(wav), "--text", utt.text]
    for pair in ctx.backend_pairs:
        args += ["-o", pair]
    spawn = time.perf_counter()
    record: dict[str, Any] = {"benchmark": ctx.benchmark or "cold_start", "kind": "cold_start", "point": "default", "phase": "measure", "seq": seq,
                              "item_id": utt.item_id, "audio_s": round(utt.duration_s, 4), "sched_ms": ctx.ms(spawn),
                              "send_ms": ctx.ms(spawn), "send_lag_ms": 0.0}
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise RuntimeError(f"child exited {proc.returncode} without a result: {proc.stderr.strip()[-500:]}")
        t = json.loads(lines[-1])
        record.update({
            "ok": True, "error": None, "text": t["text"], "done_ms": ctx.ms(t["t_done"]),
            "latency_ms": round((t["t_done"] - spawn) * 1000.0, 3),
            "process_ms": round((t["t_main"] - spawn) * 1000.0, 3),
            "import_ms": round((t["t_imported"] - t["t_main"]) * 1000.0, 3),
            "start_ms": round((t["t_started"] - t["t_imported"]) * 1000.0, 3),
            "first_request_ms": round((t["t_done"] - t["t_started"]) * 1000.0, 3),
            "init_s": round(t["t_started"] - t["t_imported"], 4),
            "warm_request_ms": round((t["t_warm_done"] - t["t_done"]) * 1000.0, 3),
        })
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as exc:
        done = time.perf_counter()
        record.update({"ok": False, "error": f"{type(exc).__name__}: {exc}", "text": "", "done_ms": ctx.ms(done),
                       "latency_ms": round((done - spawn) * 1000.0, 3)})
    ctx.recorder.request(record)


def run(ctx: KindContext, cfg: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="asrbench-cold-") as tmp:
        wav = Path(tmp) / "request.wav"
        wav.write_bytes(ctx.utterances(1)[0].wav_bytes())
        for seq in range(int(cfg["repetitions"])):
            _once(ctx, seq, float(cfg["timeout_s"]), wav)
