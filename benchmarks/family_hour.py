"""One long recording per model family (issue 43 item 3): no error, wall, RTFx and peak RSS.

Each family runs in a child process of its own, so its peak RSS (`ru_maxrss`) is its own: load the
family's checkpoint (Whisper: the embedded tiny.en, real weights, int8; the others: the
reference-written fixtures the tests use; WeNet's is generated),
build the recording by repeating dev clips from ../shared/data/speech joined by 1 s pauses, and
run it through the engine API as one offline request (`transcribe_outputs`). Reported: wall of the
request, RTFx (audio seconds per wall second), peak RSS of the whole process, the RSS before the
request (the loaded model and the recording's samples), and `request_peak_mib`: the peak RSS during
the request over that (the peak is restarted after the load through /proc/self/clear_refs).

    flock /tmp/oasr-bench.lock python -m benchmarks.family_hour --minutes 60
    flock /tmp/oasr-bench.lock python -m benchmarks.family_hour --minutes 5 --families nemo_ctc speechllm

The tiny checkpoints' random weights say nothing about accuracy; this measures that every family
takes the length, and what it costs in time and memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "libri_2412-153948-0000", "jfk_inaugural", "mfa_her")
RATE = 16000

FAMILIES: dict[str, dict[str, object]] = {
    "whisper": {"ckpt": None, "quantization": "int8_w8a8"},  # the embedded tiny.en
    "wenet": {"ckpt": "generated", "chunk_size": 8},
    "wenet_left16": {"ckpt": "generated", "chunk_size": 8, "num_left_chunks": 16},  # bounded left context
    "nemo_hybrid": {"ckpt": "nemo/hybrid_cache_aware"},
    "nemo_ctc": {"ckpt": "nemo/ctc_striding_bn"},
    "nemo_tdt": {"ckpt": "nemo/tdt"},
    "nemo_rc": {"ckpt": "nemo/unified_rc"},
    "zipformer": {"ckpt": "zipformer/tiny_streaming", "chunk_size": 64, "num_left_chunks": 4},
    "paraformer": {"ckpt": "paraformer/tiny"},
    "speechllm": {"ckpt": "speechllm/qwen2_audio", "family_options": {"speechllm": {"max_new_tokens": 48}}},
}
"""Family run name -> its checkpoint under tests/fixtures (None: the embedded default model) and
EngineConfig fields."""


def recording(seconds: float) -> np.ndarray:
    """Dev clips joined by 1 s pauses, repeated to `seconds` (cut at the end)."""
    from tests.conftest import load_clip

    pause = np.zeros(RATE, dtype=np.float32)
    unit = np.concatenate([x for c in CLIPS for x in (load_clip(c), pause)])
    reps = int(np.ceil(seconds * RATE / unit.size))
    return np.tile(unit, reps)[: int(seconds * RATE)]


def status_mib(field: str) -> float:
    """A /proc/self/status memory line (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def reset_peak() -> bool:
    """Start the peak RSS (VmHWM) afresh from the current RSS (Linux >= 4.0); False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def run_one(family: str, seconds: float, threads: int, family_options: dict[str, object],
            engine_options: dict[str, object] | None = None) -> dict[str, object]:
    import torch

    from engine import ASREngine, EngineConfig

    torch.set_num_threads(threads)
    spec = {**FAMILIES[family], **(engine_options or {})}
    ckpt = spec.pop("ckpt")
    if family_options:
        spec["family_options"] = {**spec.get("family_options", {}), **family_options}  # type: ignore[dict-item]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt_dir: str | None = None
        if ckpt == "generated":
            from engine.models.wenet.testing import write_checkpoint

            ckpt_dir = write_checkpoint(os.path.join(tmp, "wenet"))
        elif ckpt is not None:
            ckpt_dir = str(FIXTURES / str(ckpt))
        audio = recording(seconds)
        engine = ASREngine(EngineConfig(ckpt_dir=ckpt_dir, service_mode="offline", **spec))  # type: ignore[arg-type]
        loaded = status_mib("VmRSS")
        fresh_peak = reset_peak()
        start = time.perf_counter()
        (out,) = engine.transcribe_outputs(audio)
        wall = time.perf_counter() - start
        request_peak = (status_mib("VmHWM") if fresh_peak else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        engine.shutdown()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"family": family, "audio_s": round(seconds, 1), "wall_s": round(wall, 2), "rtfx": round(seconds / wall, 1),
            "peak_rss_mib": round(peak), "loaded_rss_mib": round(loaded),
            "request_peak_mib": round(request_peak - loaded, 1), "fresh_peak": fresh_peak, "error": out.error,
            "finish_reason": out.finish_reason, "words": len(out.text.split()), "segments": len(out.segments)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0, help="length of the recording")
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per run (1: on a shared 2-core host more threads spin against each other)")
    parser.add_argument("--one", choices=sorted(FAMILIES), help=argparse.SUPPRESS)  # the child's run
    parser.add_argument("--family-options", default="{}",
                        help="JSON merged into each run's EngineConfig.family_options")
    parser.add_argument("--engine-options", default="{}",
                        help='JSON of EngineConfig fields for each run (e.g. {"max_decode_rows": 8})')
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.minutes * 60, args.threads, json.loads(args.family_options),
                                 json.loads(args.engine_options))))
        return
    rows = []
    for family in args.families:
        cmd = [sys.executable, "-m", "benchmarks.family_hour", "--one", family, "--minutes", str(args.minutes),
               "--threads", str(args.threads), "--family-options", args.family_options,
               "--engine-options", args.engine_options]  # fmt: skip
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            row: dict[str, object] = {"family": family, "error": done.stderr.strip().splitlines()[-1:]}
        else:
            row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
