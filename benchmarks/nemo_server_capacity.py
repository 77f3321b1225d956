"""Cache-aware NeMo streams through a real server: `python -m benchmarks.nemo_capacity --server`.

For each trained chunk size and max_batch_size, one streaming server (`uvicorn app.main:app` on
the generated `.nemo`, OASR_CHUNK_SIZE / OASR_NUM_LEFT_CHUNKS selecting the look-ahead) serves
every session count in turn; each session is an OpenAI realtime WebSocket client
(benchmarks/asrbench/backends/realtime.py) sending one trained chunk of audio at a time on
absolute due times, starts staggered.

The realtime protocol carries text, not step numbers, so each `delta` is placed on the step that
produced it from a reference run: the in-process engine streams, alone, the very samples the
server's engine gets (the client's resampling to the wire's 24 kHz, PCM16, the server's resampling
back: `served_audio`) and records each step's partial text and the samples that step needed
(benchmarks/nemo_capacity.py). A delta belongs to the first step whose partial is at least as long
as the text so far. Its partial latency is from the moment the client had sent the audio
that step needed to the delta's arrival: queueing, compute, the WebSocket and the server's
resampler, not the model's look-ahead (seed 003's definition). `server_cpu_cores` is the server
process's CPU time (user + system, all its threads) over the point's wall time. `final_alike_min` is the least
similar session's final against the reference's (difflib ratio): 1 unless the server changed the
text; a server that falls behind delivers the same text later.
"""

from __future__ import annotations

import bisect
import difflib
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import psutil
import soxr

from app.audio import pcm16_to_float
from app.audio.stream import StreamResampler
from benchmarks.asrbench.audio import to_pcm16_bytes
from benchmarks.asrbench.backends.realtime import WIRE_RATE, RealtimeStream
from benchmarks.asrbench.backends.server_process import ServerProcess
from benchmarks.streaming_capacity import percentile, stream_batch_histogram
from engine import ASREngine, EngineConfig
from engine.request import Request
from engine.types import DecodingOptions

SAMPLE_RATE = 16000
KEEPS_UP_DRIFT = 0.05
"""Median partial-latency slope (s per s of audio) under which a point counts as keeping up."""


@dataclass(frozen=True)
class Reference:
    """The engine's own stream of the benchmark audio, one entry per step."""

    needed: list[int]
    """Samples captured before each step could run (its last feature frame's window)."""
    lengths: list[int]
    """Length of each step's partial text (the last entry: the final's)."""
    final: str


def look_ahead_env(look_ahead: list[int]) -> dict[str, str]:
    left, right = look_ahead
    return {"OASR_CHUNK_SIZE": str(right + 1), "OASR_NUM_LEFT_CHUNKS": str(left // (right + 1))}


def served_audio(audio: np.ndarray, piece: int) -> np.ndarray:
    """The samples a server's engine gets when a RealtimeStream sends `audio`, `piece` samples a
    send: the client's stream resampler to 24 kHz (as RealtimeStream runs it), PCM16 on the wire,
    the server's StreamResampler back to 16 kHz."""
    client = soxr.ResampleStream(SAMPLE_RATE, WIRE_RATE, 1, dtype="float32")
    server = StreamResampler(WIRE_RATE, SAMPLE_RATE)
    pieces = [audio[off : off + piece] for off in range(0, audio.size, piece)] + [np.zeros(0, np.float32)]
    out = []
    for i, chunk in enumerate(pieces):
        wire = client.resample_chunk(chunk, last=i == len(pieces) - 1)
        if wire.size:
            out.append(server.process(pcm16_to_float(to_pcm16_bytes(wire))))
    return np.concatenate([*out, server.flush()])


def reference(ckpt_dir: str, audio: np.ndarray, look_ahead: list[int]) -> Reference:
    """Stream `audio` alone through the in-process engine, one step at a time."""
    left, right = look_ahead
    engine = ASREngine(EngineConfig(ckpt_dir=ckpt_dir, service_mode="streaming", chunk_size=right + 1,
                                    num_left_chunks=left // (right + 1), num_threads=1))  # fmt: skip
    try:
        runner = engine.runner
        geo, frontend = runner.geometry, runner.ckpt.frontend  # type: ignore[attr-defined]
        req = Request("reference", True, DecodingOptions(), SAMPLE_RATE)
        runner.admit([req])
        req.append_audio(audio)
        lengths: list[int] = []
        while outs := runner.execute():
            lengths += [len(o.text.strip()) for o in outs]
        req.input_finished = True
        final = ""
        while not final:
            for o in runner.execute():
                lengths.append(len(o.text.strip()))
                final = o.text.strip() if o.finished else final
        hop, half_window = frontend.cfg.hop_length, frontend.pad
        needed = [min((geo.first_chunk + k * geo.chunk - 1) * hop + half_window, audio.size)
                  for k in range(len(lengths))]  # fmt: skip
        return Reference(needed, lengths, final)
    finally:
        engine.shutdown()


@contextmanager
def serve(ckpt_dir: str, look_ahead: list[int], max_batch_size: int, threads: int) -> Iterator[ServerProcess]:
    env = {"OASR_CKPT_DIR": ckpt_dir, "OASR_SERVICE_MODE": "streaming", "OASR_LOG_LEVEL": "warning",
           "OASR_MAX_BATCH_SIZE": str(max_batch_size), "OASR_MAX_DECODE_ROWS": str(max_batch_size),
           "OASR_NUM_THREADS": str(threads), **look_ahead_env(look_ahead)}  # fmt: skip
    server = ServerProcess(env, startup_timeout_s=300.0)
    try:
        warm = RealtimeStream(server.base_url, model="", turn_detection="none")
        warm.send(np.zeros(SAMPLE_RATE, dtype=np.float32))
        warm.close_input()
        warm.result(120.0)
        yield server
    finally:
        server.stop()


@dataclass
class _Session:
    sent: list[float] = field(default_factory=list)
    """Wall time each piece had been sent."""
    audio_end: float = 0.0
    stream: RealtimeStream | None = None
    error: str | None = None


def run_point(server: ServerProcess, n: int, audio: np.ndarray, ref: Reference, piece: int,
              stagger_s: float) -> dict[str, object]:  # fmt: skip
    """n sessions of `audio`, `piece` samples a send; the point's row."""
    piece_s = piece / SAMPLE_RATE
    sessions = [_Session() for _ in range(n)]
    before = stream_batch_histogram(server.base_url)
    proc = psutil.Process(server.proc.pid)
    cpu_before, wall_before = sum(proc.cpu_times()[:2]), time.perf_counter()
    t0 = time.perf_counter() + 0.5

    def client(k: int) -> None:
        s, start = sessions[k], t0 + k * stagger_s
        time.sleep(max(0.0, start - time.perf_counter()))
        try:
            s.stream = RealtimeStream(server.base_url, model="", turn_detection="none")
            for i, off in enumerate(range(0, audio.size, piece)):
                time.sleep(max(0.0, start + (i + 1) * piece_s - time.perf_counter()))  # sent once captured
                s.stream.send(audio[off : off + piece])
                s.sent.append(time.perf_counter())
            s.audio_end = time.perf_counter()
            s.stream.close_input()
            s.stream.result(300.0)
        except Exception as exc:  # a failed session is reported, not raised
            s.error = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    server_cores = (sum(proc.cpu_times()[:2]) - cpu_before) / (time.perf_counter() - wall_before)
    after = stream_batch_histogram(server.base_url)
    errors = [s.error for s in sessions if s.error]
    if errors:
        raise RuntimeError(f"{len(errors)} of {n} sessions failed: {errors[0]}")
    latencies, drifts, finals, alike = [], [], [], []
    for s in sessions:
        assert s.stream is not None and s.stream.final_t is not None
        finals.append(s.stream.final_t - s.audio_end)
        alike.append(difflib.SequenceMatcher(None, s.stream.result(0.0), ref.final, autojunk=False).ratio())
        points = []
        for t, text in s.stream.partials:
            step = min(bisect.bisect_left(ref.lengths, len(text.strip())), len(ref.needed) - 1)
            captured = s.sent[min(ref.needed[step] // piece, len(s.sent) - 1)]
            if t <= s.audio_end:  # later deltas belong to the final's latency
                points.append((ref.needed[step] / SAMPLE_RATE, t - captured))
        latencies += [lat for _, lat in points]
        if len(points) >= 3:
            drifts.append(float(np.polyfit([p for p, _ in points], [lat for _, lat in points], 1)[0]))
    steps = after["+Inf"] - before["+Inf"]
    drift = statistics.median(drifts) if drifts else float("nan")
    return {
        "sessions": n, "partials": len(latencies),
        "partial_p50_s": round(statistics.median(latencies), 3) if latencies else float("nan"),
        "partial_p95_s": round(percentile(latencies, 0.95), 3) if latencies else float("nan"),
        "drift_s_per_s": round(drift, 3), "final_p50_s": round(statistics.median(finals), 3),
        "final_p95_s": round(percentile(finals, 0.95), 3),
        "server_cpu_cores": round(server_cores, 2),
        "mean_streams_per_step": round((after["sum"] - before["sum"]) / steps, 2) if steps else 0.0,
        "final_alike_min": round(min(alike), 3), "keeps_up": drift <= KEEPS_UP_DRIFT,
    }  # fmt: skip
