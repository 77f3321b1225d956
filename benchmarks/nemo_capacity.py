"""How many cache-aware NeMo streams keep up with real time, batched versus one at a time?

Generates a FastConformer of realistic size (random weights, NeMo's published look-aheads
[70, 13 | 6 | 1 | 0] = 1120 / 560 / 160 / 80 ms chunks; engine/models/nemo/testing.py), then for
each look-ahead and each N runs N streams fed like microphones (one trained chunk of audio at a
time, on absolute due times, starts staggered) through the engine driven by one thread, as the
server drives it. Reported per point (seed 003's measurements):

- partial latency: from the moment the audio a chunk step needs had been captured to the partial
  output of that step (queueing + compute, not the model's look-ahead), p50 / p95;
- drift: per stream, the slope of partial latency against audio position (s per s of audio),
  median over streams: a server keeps up while it stays near zero;
- final latency after the end of audio, p50 / p95; streams advanced per step (mean / max).

    python -m benchmarks.nemo_capacity --sessions 1 2 4 8 16 --chunks 1120 160 --batch-sizes 64 1

`--step-cost` measures instead what a batched step costs in CPU time (process time, one torch
thread) for B streams at once, and the streams one core sustains from it (chunk period / cost per
stream-chunk): a load-independent capacity figure for machines shared with other work, where the
paced run measures the neighbours as much as the engine.

    python -m benchmarks.nemo_capacity --step-cost --chunks 1120 560 160 80 --batch 1 8 32

`--server` runs the same paced sessions through a real streaming server over `/v1/realtime`
(benchmarks/nemo_server_capacity.py), one server per chunk size and max_batch_size, and reports
the 1-minute load average at the start of each point (the machine's other work competes too).

    python -m benchmarks.nemo_capacity --server --chunks 560 160 80 --sessions 1 2 4 8 --batch-sizes 64 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.streaming_capacity import load, percentile
from engine import ASREngine, EngineConfig, RequestOutput
from engine.loop import drive
from engine.models.nemo.testing import NEMO_LOOK_AHEADS, UNIFIED_TEMPLATE, write_checkpoint

SAMPLE_RATE = 16000
KEEPS_UP_DRIFT = 0.05
"""Median partial-latency slope (s per s of audio) under which a point counts as keeping up."""


@dataclass
class Stream:
    rid: str
    start: float
    captured: list[float] = field(default_factory=list)
    """Wall time by which audio sample i * piece had been captured (one entry per piece)."""
    partials: list[tuple[float, float]] = field(default_factory=list)
    """(audio position s, latency s) of each step's partial."""
    audio_end: float = 0.0
    final: float | None = None


def run(ckpt_dir: str, n: int, audio: np.ndarray, look_ahead: list[int], max_batch_size: int, stagger_s: float,
        threads: int | None) -> dict[str, object]:  # fmt: skip
    left, right = look_ahead
    engine = ASREngine(EngineConfig(ckpt_dir=ckpt_dir, service_mode="streaming", max_batch_size=max_batch_size,
                                    chunk_size=right + 1, num_left_chunks=left // (right + 1), num_threads=threads))  # fmt: skip
    geo = engine.runner.geometry  # type: ignore[attr-defined]
    frontend = engine.runner.ckpt.frontend  # type: ignore[attr-defined]
    hop, half_window = frontend.cfg.hop_length, frontend.pad
    piece = geo.out_frames * geo.factor * hop  # one chunk of audio per send
    chunk_s = piece / SAMPLE_RATE
    engine.transcribe_offline(audio[:SAMPLE_RATE])  # warm-up
    streams: dict[str, Stream] = {}
    lock = threading.Lock()
    t0 = time.monotonic() + 0.2

    def needed_samples(step: int) -> int:
        """Samples captured before step `step` (1-based) can run: its last feature frame's window."""
        frames = geo.first_chunk + (step - 1) * geo.chunk
        return (frames - 1) * hop + half_window

    def feeder(k: int) -> None:
        start = t0 + k * stagger_s
        time.sleep(max(0.0, start - time.monotonic()))
        rid = engine.add_streaming_request()
        s = Stream(rid, start)
        with lock:
            streams[rid] = s
        for i, off in enumerate(range(0, audio.size, piece)):
            due = start + (i + 1) * chunk_s  # a piece is sent once it has been captured
            time.sleep(max(0.0, due - time.monotonic()))
            s.captured.append(time.monotonic())
            engine.feed_chunk(rid, audio[off : off + piece], is_last=off + piece >= audio.size)
        s.audio_end = time.monotonic()

    workers = [threading.Thread(target=feeder, args=(k,), daemon=True) for k in range(n)]
    for w in workers:
        w.start()
    stepped: list[int] = []
    done = 0

    def deliver(outs: list[RequestOutput]) -> None:
        nonlocal done
        if engine.runner.streams_stepped:
            stepped.append(engine.runner.streams_stepped)
        now = time.monotonic()
        for o in outs:
            s = streams.get(o.request_id)
            if s is None:
                continue
            if o.finished:
                s.final, done = now - s.audio_end, done + 1
                continue
            step = len(s.partials) + 1
            sample = needed_samples(step)
            piece_idx = min(sample // piece, len(s.captured) - 1)
            s.partials.append((sample / SAMPLE_RATE, now - s.captured[piece_idx]))

    drive(engine, deliver, stop=lambda: done >= n)
    engine.shutdown()
    latencies = [lat for s in streams.values() for _, lat in s.partials]
    drifts = [float(np.polyfit([p for p, _ in s.partials], [lat for _, lat in s.partials], 1)[0])
              for s in streams.values() if len(s.partials) >= 3]  # fmt: skip
    finals = [s.final for s in streams.values() if s.final is not None]
    drift = statistics.median(drifts) if drifts else float("nan")
    return {
        "chunk_ms": round(chunk_s * 1000), "sessions": n, "max_batch_size": max_batch_size,
        "partial_p50_s": round(statistics.median(latencies), 3), "partial_p95_s": round(percentile(latencies, 0.95), 3),
        "drift_s_per_s": round(drift, 3), "final_p50_s": round(statistics.median(finals), 3),
        "final_p95_s": round(percentile(finals, 0.95), 3),
        "mean_streams_per_step": round(sum(stepped) / len(stepped), 2) if stepped else 0.0,
        "max_streams_per_step": max(stepped, default=0), "keeps_up": drift <= KEEPS_UP_DRIFT,
    }  # fmt: skip


def step_cost(ckpt_dir: str, audio: np.ndarray, look_ahead: list[int], batch: int, steps: int) -> dict[str, object]:
    """CPU seconds of `steps` engine steps that each advance `batch` streams by one chunk."""
    left, right = look_ahead
    cpu = cpu_per_step(EngineConfig(ckpt_dir=ckpt_dir, service_mode="streaming", max_batch_size=batch,
                                    chunk_size=right + 1, num_left_chunks=left // (right + 1), num_threads=1),
                       audio, batch, steps)  # fmt: skip
    return _cost_row((right + 1) * 0.08, batch, cpu)


def buffered_step_cost(ckpt_dir: str, audio: np.ndarray, preset: tuple[int, int, int], batch: int, steps: int,
                       tentative: bool) -> dict[str, object]:  # fmt: skip
    """The same for buffered streams of window `preset`, with or without tentative partials."""
    options = {"nemo": {"stream_context": preset, "tentative_partials": tentative}}
    cpu = cpu_per_step(EngineConfig(ckpt_dir=ckpt_dir, service_mode="streaming", max_batch_size=batch,
                                    num_threads=1, family_options=options), audio, batch, steps)  # fmt: skip
    return {"preset": list(preset), "tentative": tentative, **_cost_row(preset[1] * 0.08, batch, cpu)}


def cpu_per_step(config: EngineConfig, audio: np.ndarray, batch: int, steps: int) -> float:
    """Process seconds per engine step advancing `batch` streams that all hold `audio`."""
    from engine.request import Request
    from engine.types import DecodingOptions

    engine = ASREngine(config)
    runner = engine.runner
    reqs = [Request(f"s{i}", True, DecodingOptions(), SAMPLE_RATE) for i in range(batch)]
    runner.admit(reqs)
    for req in reqs:
        req.append_audio(audio)
    runner.execute()  # first chunks (shorter) and warm-up
    start = time.process_time()
    for _ in range(steps):
        runner.execute()
    cpu = (time.process_time() - start) / steps
    engine.shutdown()
    return cpu


def _cost_row(chunk_s: float, batch: int, cpu: float) -> dict[str, object]:
    return {"chunk_ms": round(chunk_s * 1000), "batch": batch, "cpu_ms_per_step": round(cpu * 1000, 1),
            "cpu_ms_per_stream_chunk": round(cpu / batch * 1000, 1),
            "streams_per_core": round(chunk_s / (cpu / batch), 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--chunks", type=int, nargs="+", default=[1120, 560, 160, 80],
                        help="trained chunk sizes to run, ms (of 1120, 560, 160, 80)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 1])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--blank-bias", type=float, default=0.4,
                        help="added to blank's logit of the random joint: with --max-symbols 1, 0.4 emits a token "
                             "on about a third of the frames, as a trained model does (lower: on every frame)")
    parser.add_argument("--max-symbols", type=int, default=1, help="tokens a frame may emit (the template's: 5)")
    parser.add_argument("--clip", default="libri_2412-153948-0000")
    parser.add_argument("--stagger-s", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads; 1 on a busy machine, where OpenMP workers spinning for a descheduled "
                             "sibling cost 10-20x the work (2.7 s against 0.1 s of CPU for one step, measured)")
    parser.add_argument("--step-cost", action="store_true", help="measure CPU time per batched step instead")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32], help="--step-cost batch sizes")
    parser.add_argument("--tentative-cost", action="store_true",
                        help="CPU time of buffered steps (a generated unified checkpoint) with tentative partials "
                             "on and off, alternating, --repeat times")
    parser.add_argument("--repeat", type=int, default=3, help="--tentative-cost repetitions")
    parser.add_argument("--server", action="store_true",
                        help="run the sessions through a real streaming server over /v1/realtime WebSockets")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    audio = load(args.clip)
    by_ms = {(r + 1) * 80: [left, r] for left, r in NEMO_LOOK_AHEADS}
    rows = []
    if args.tentative_cost:
        tentative_cost(audio, args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        write_checkpoint(Path(tmp) / "model.nemo", d_model=args.d_model, n_layers=args.layers,
                         blank_bias=args.blank_bias, max_symbols=args.max_symbols)
        if args.step_cost:
            print("| chunk ms | streams a step | CPU ms a step | CPU ms a stream-chunk | streams a core sustains |")
            print("|---|---|---|---|---|")
            for ms in args.chunks:
                for b in args.batch:
                    r = step_cost(tmp, audio, by_ms[ms], b, steps=5)
                    print(f"| {r['chunk_ms']} | {b} | {r['cpu_ms_per_step']} | {r['cpu_ms_per_stream_chunk']} | "
                          f"{r['streams_per_core']} |", flush=True)
            return
        if args.server:
            server_sweep(tmp, audio, [(ms, by_ms[ms]) for ms in args.chunks], args)
            return
        for ms in args.chunks:
            for mbs in args.batch_sizes:
                for n in args.sessions:
                    row = run(tmp, n, audio, by_ms[ms], mbs, args.stagger_s, args.threads)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    if not row["keeps_up"]:
                        break  # larger N only falls further behind
    print(f"\nFastConformer d_model {args.d_model} x {args.layers} layers (random weights), in-process engine\n")
    print("| chunk ms | max_batch_size | sessions | partial p50 / p95 s | drift s/s | final p50 / p95 s | "
          "streams a step mean / max | keeps up |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['chunk_ms']} | {r['max_batch_size']} | {r['sessions']} | {r['partial_p50_s']} / "
              f"{r['partial_p95_s']} | {r['drift_s_per_s']} | {r['final_p50_s']} / {r['final_p95_s']} | "
              f"{r['mean_streams_per_step']} / {r['max_streams_per_step']} | {r['keeps_up']} |")


def tentative_cost(audio: np.ndarray, args: argparse.Namespace) -> None:
    """What showing a buffered stream's right context costs: steps timed with it on and off."""
    print("| window (L, C, R) frames | streams a step | CPU ms a step, committed only | with tentative | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        write_checkpoint(Path(tmp) / "model.nemo", d_model=args.d_model, n_layers=args.layers, template=UNIFIED_TEMPLATE,
                         blank_bias=args.blank_bias, max_symbols=args.max_symbols)  # fmt: skip
        for preset in [(10, 1, 1), (10, 1, 4), (10, 4, 4)]:
            for b in args.batch:
                cost: dict[bool, list[float]] = {False: [], True: []}
                for _ in range(args.repeat):
                    for tentative in (False, True):
                        r = buffered_step_cost(tmp, audio, preset, b, 8, tentative)
                        cost[tentative].append(float(r["cpu_ms_per_step"]))  # type: ignore[arg-type]
                off, on = statistics.median(cost[False]), statistics.median(cost[True])
                print(f"| {preset} | {b} | {off} | {on} | {on / off:.3f} |", flush=True)


def server_sweep(ckpt_dir: str, audio: np.ndarray, chunks: list[tuple[int, list[int]]], args: argparse.Namespace) -> None:
    from benchmarks.nemo_server_capacity import reference, run_point, serve, served_audio

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the server on the way out
    rows = []
    for ms, look_ahead in chunks:
        ref = reference(ckpt_dir, served_audio(audio, ms * SAMPLE_RATE // 1000), look_ahead)
        for mbs in args.batch_sizes:
            with serve(ckpt_dir, look_ahead, mbs, args.threads) as server:
                for n in args.sessions:
                    load = os.getloadavg()[0]
                    row = {"chunk_ms": ms, "max_batch_size": mbs, "load_avg_1m": round(load, 1),
                           **run_point(server, n, audio, ref, ms * SAMPLE_RATE // 1000, args.stagger_s)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    if not row["keeps_up"]:
                        break  # larger N only falls further behind
    print(f"\nFastConformer d_model {args.d_model} x {args.layers} layers (random weights), streaming server over "
          f"/v1/realtime, {args.threads} torch thread(s), {os.cpu_count()} CPUs\n")
    print("| chunk ms | max_batch_size | sessions | load avg 1 min | partial p50 / p95 s | drift s/s | "
          "final p50 / p95 s | server CPU (cores) | streams a step (mean) | final vs engine's text (least alike) | "
          "keeps up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['chunk_ms']} | {r['max_batch_size']} | {r['sessions']} | {r['load_avg_1m']} | "
              f"{r['partial_p50_s']} / {r['partial_p95_s']} | {r['drift_s_per_s']} | {r['final_p50_s']} / "
              f"{r['final_p95_s']} | {r['server_cpu_cores']} | {r['mean_streams_per_step']} | {r['final_alike_min']} | {r['keeps_up']} |")


if __name__ == "__main__":
    main()
