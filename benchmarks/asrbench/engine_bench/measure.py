"""The three engine measurements. Each builds its requests through the public engine API
(`add_request`, `add_streaming_request`, `feed_chunk`) and steps the engine only through
`engine.loop.drive`, the server's own loop; the step's CPU time and the streams it advanced are
read by a `LoopObserver` (process time: what a shared machine's neighbours do not inflate)."""

from __future__ import annotations

import hashlib
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine import ASREngine, DecodingOptions, RequestOutput
from engine.loop import LoopObserver, drive

SAMPLE_RATE = 16000
KEEPS_UP_DRIFT = 0.05
"""Median partial-latency slope (s per s of audio) under which a paced point counts as keeping up."""


class StepClock(LoopObserver):
    """Process CPU seconds of every step and the live streams it advanced together."""

    def __init__(self, engine: ASREngine) -> None:
        self.engine = engine
        self.cpu: list[float] = []
        self.streams: list[int] = []
        self._started = 0.0

    def step_started(self) -> None:
        self._started = time.process_time()

    def step_failed(self, exc: Exception) -> None:
        raise exc  # a benchmark stops at a failed step instead of timing the failure

    def stepped(self, seconds: float, failed: bool) -> None:
        self.cpu.append(time.process_time() - self._started)
        # ModelRunner.streams_stepped: the public count of streams whose forward ran together
        self.streams.append(int(getattr(self.engine.runner, "streams_stepped", 0) or 0))

    def stream_steps(self) -> list[int]:
        return [s for s in self.streams if s]


def step_until_idle(engine: ASREngine, deliver: Callable[[list[RequestOutput]], object],
                    observer: LoopObserver | None = None) -> None:
    """Step `engine` through the loop until it has nothing it can do now (every stream waits for
    audio, or all is done); a failed step raises (StepClock) instead of failing the requests."""
    drive(engine, deliver, stop=lambda: not engine.has_work(),  # type: ignore[arg-type]
          observer=observer or StepClock(engine))


def _checked(outputs: list[RequestOutput]) -> list[RequestOutput]:
    for out in outputs:
        if out.is_error:
            raise RuntimeError(f"request {out.request_id} failed at {out.error_stage}: {out.error}")
    return outputs


def _stream_columns(clock: StepClock) -> dict[str, object]:
    stepped = clock.stream_steps()
    return {"mean_streams_per_step": round(statistics.fmean(stepped), 2) if stepped else 0.0,
            "max_streams_per_step": max(stepped, default=0)}


def rtf(engine: ASREngine, audios: list[np.ndarray], decoding: DecodingOptions | None = None) -> dict[str, object]:
    """Every audio in `audios` as one offline request, all admitted before the first step; one row."""
    clock = StepClock(engine)
    ids = {engine.add_request(a, decoding=decoding) for a in audios}
    finished: list[RequestOutput] = []
    kv_peak = 0

    def deliver(outs: list[RequestOutput]) -> None:
        nonlocal kv_peak
        finished.extend(o for o in _checked(outs) if o.finished and o.request_id in ids)
        kv_peak = max(kv_peak, engine.runner.stats().kv_blocks_used)

    wall = time.perf_counter()
    drive(engine, deliver, stop=lambda: len(finished) >= len(ids), observer=clock)
    wall = time.perf_counter() - wall
    seconds = sum(len(a) for a in audios) / SAMPLE_RATE
    cpu = sum(clock.cpu)
    tokens = sum(len(o.tokens) for o in finished)
    return {"batch": len(audios), "audio_s": round(seconds, 1), "steps": len(clock.cpu), "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "rtfx_wall": round(seconds / wall, 1), "rtfx_cpu": round(seconds / cpu, 1),
            "tokens": tokens, "tokens_per_cpu_s": round(tokens / cpu, 1), "kv_blocks_peak": kv_peak}


def lockstep(engine: ASREngine, audios: list[np.ndarray], tick_s: float | None = None,
             decoding: DecodingOptions | None = None) -> dict[str, object]:
    """One live stream per audio; every tick feeds each stream its next `tick_s` (default: one
    step's audio, `ModelRunner.stream_chunk_samples`) and drives the engine until it is idle, so
    every stream gets every step its audio asks for whatever the machine's load: two runs of the
    same code give the same outputs (their `digest`)."""
    clock = StepClock(engine)
    piece = int(tick_s * SAMPLE_RATE) if tick_s else int(engine.runner.stream_chunk_samples)
    ids = [engine.add_streaming_request(decoding=decoding) for _ in audios]
    texts: dict[str, list[str]] = {rid: [] for rid in ids}
    finals: dict[str, str] = {}

    def deliver(outs: list[RequestOutput]) -> None:
        for o in _checked(outs):
            if o.request_id in texts:
                texts[o.request_id].append(o.text)
                if o.finished:
                    finals[o.request_id] = o.text

    longest = max(len(a) for a in audios)
    for off in range(0, longest, piece):
        for rid, audio in zip(ids, audios, strict=True):
            if off < len(audio):
                engine.feed_chunk(rid, audio[off:off + piece], is_last=off + piece >= len(audio))
        step_until_idle(engine, deliver, clock)
    drive(engine, deliver, stop=lambda: len(finals) == len(ids), observer=clock)
    seconds = sum(len(a) for a in audios) / SAMPLE_RATE
    cpu = sum(clock.cpu)
    partials = [t for rid in ids for t in texts[rid][:-1]]
    changed = sum(1 for rid in ids for a, b in zip(texts[rid], texts[rid][1:], strict=False) if a != b)
    digest = hashlib.sha256("\x1e".join("\x1f".join(texts[rid]) for rid in ids).encode()).hexdigest()[:12]
    return {"streams": len(audios), "max_batch_size": engine.config.max_batch_size, "tick_ms": round(piece / 16),
            "audio_s": round(seconds, 1), "steps": len(clock.cpu), "cpu_s": round(cpu, 2),
            "cpu_ms_per_step": round(1000 * cpu / max(len(clock.cpu), 1), 1),
            "cpu_ms_per_stream_s": round(1000 * cpu / seconds, 1), "streams_per_core": round(seconds / cpu, 1),
            **_stream_columns(clock), "partials": len(partials), "partials_changed": changed, "digest": digest}


@dataclass
class _Paced:
    rid: str
    captured: list[float] = field(default_factory=list)
    """Wall time by which the i-th piece of audio had been captured."""
    partials: list[tuple[float, float]] = field(default_factory=list)
    """(audio position s, latency s) of each partial."""
    audio_end: float = 0.0
    final: float | None = None


def paced(engine: ASREngine, audio: np.ndarray, sessions: int, stagger_s: float = 0.1,
          decoding: DecodingOptions | None = None) -> dict[str, object]:
    """`sessions` streams of `audio`, each fed one step's audio (`stream_chunk_samples`) at a time on
    absolute due times, as a microphone delivers it; the engine is driven by this thread. The k-th
    partial of a stream answers its k-th step, which needed the audio up to k pieces: its latency
    runs from the capture of that piece (queueing + compute, not the model's look-ahead)."""
    clock = StepClock(engine)
    piece = int(engine.runner.stream_chunk_samples)
    piece_s = piece / SAMPLE_RATE
    streams: dict[str, _Paced] = {}
    lock = threading.Lock()
    t0 = time.monotonic() + 0.2

    def feeder(k: int) -> None:
        start = t0 + k * stagger_s
        time.sleep(max(0.0, start - time.monotonic()))
        rid = engine.add_streaming_request(decoding=decoding)
        s = _Paced(rid)
        with lock:
            streams[rid] = s
        for i, off in enumerate(range(0, audio.size, piece)):
            time.sleep(max(0.0, start + (i + 1) * piece_s - time.monotonic()))  # sent once captured
            s.captured.append(time.monotonic())
            engine.feed_chunk(rid, audio[off:off + piece], is_last=off + piece >= audio.size)
        s.audio_end = time.monotonic()

    done = 0

    def deliver(outs: list[RequestOutput]) -> None:
        nonlocal done
        now = time.monotonic()
        for o in _checked(outs):
            with lock:
                s = streams.get(o.request_id)
            if s is None:
                continue
            if o.finished:
                s.final, done = now - s.audio_end, done + 1
            elif s.captured:
                k = min(len(s.partials), len(s.captured) - 1)
                s.partials.append(((k + 1) * piece_s, now - s.captured[k]))

    workers = [threading.Thread(target=feeder, args=(k,), daemon=True) for k in range(sessions)]
    for w in workers:
        w.start()
    drive(engine, deliver, stop=lambda: done >= sessions, observer=clock)
    latencies = [lat for s in streams.values() for _, lat in s.partials]
    drifts = [float(np.polyfit([p for p, _ in s.partials], [lat for _, lat in s.partials], 1)[0])
              for s in streams.values() if len(s.partials) >= 3]  # fmt: skip
    finals = [s.final for s in streams.values() if s.final is not None]
    drift = statistics.median(drifts) if drifts else float("nan")
    return {"chunk_ms": round(piece_s * 1000), "sessions": sessions, "max_batch_size": engine.config.max_batch_size,
            "partial_p50_s": _q(latencies, 0.5), "partial_p95_s": _q(latencies, 0.95),
            "drift_s_per_s": round(drift, 3), "final_p50_s": _q(finals, 0.5), "final_p95_s": _q(finals, 0.95),
            **_stream_columns(clock), "keeps_up": bool(drift <= KEEPS_UP_DRIFT)}


def _q(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank), rounded to ms; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(np.ceil(q * len(ordered))) - 1)], 3)


MEASUREMENTS: dict[str, Callable[..., dict[str, Any]]] = {"rtf": rtf, "lockstep": lockstep, "paced": paced}
