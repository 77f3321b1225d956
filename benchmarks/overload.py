"""Who is refused, and how, when offered work exceeds capacity? (issue 35, must-show 2)

Starts a real streaming server (`uvicorn app.main:app`, defaults unless overridden) and then:

1. times the clip (a ~7.7 s dev clip) transcribed alone on each surface: OpenAI REST upload,
   gRPC `Recognize`, and an OpenAI realtime session streaming it at real time;
2. measures capacity: a closed loop of `--capacity-concurrency` concurrent REST uploads of the
   clip for `--capacity-s`, in requests (and audio-seconds) per second;
3. admits `--live-sessions` realtime sessions (turn detection none, paced at real time, dev clips
   joined by pauses as in benchmarks/streaming_capacity.py, one committed turn per clip) that
   stay open through the whole overload phase;
4. offers `--factor` times the measured capacity for `--duration-s` as an open-loop Poisson (or
   uniform) arrival process, dealt in turn to REST uploads, gRPC Recognize calls and new realtime
   sessions of the clip, each with a generous client timeout, and waits for every one to end.

Every offered request ends in exactly one outcome: served (HTTP 200 / gRPC OK / a realtime
session's final transcript), refused with a retry hint (HTTP `Retry-After`, gRPC trailing
`grpc-retry-pushback-ms`), refused without one, or lost (any other status, a timeout, a dropped
connection, a session that failed after it was admitted). The admission contract
(docs/operations.md, "Overload") makes "refused without a hint" and "lost" zero, and says an
admitted live session is never shed: the exit status is 1 when any of those is violated. The
latency checks (accepted p99 within max_queue_delay_secs plus the clip's processing time alone;
the live sessions' final p95 within 1.5 s) are reported, not enforced: on a shared CPU they say
as much about the neighbours as about the server.

    python -m benchmarks.overload                                  # 60 s at 3x, server defaults
    python -m benchmarks.overload --duration-s 20 --factor 2 --max-queue-delay-secs 10
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
import httpx
import numpy as np

from benchmarks.asrbench.audio import to_wav_bytes
from benchmarks.asrbench.backends.realtime import RealtimeStream
from benchmarks.asrbench.backends.server_process import ServerProcess
from benchmarks.streaming_capacity import (
    KEEPS_UP_P95_S,
    PAUSE_S,
    SAMPLE_RATE,
    load,
    percentile,
    session_clips,
)

logger = logging.getLogger(__name__)

CLIP = "mfa_words"
"""7.7 s of read speech: one Whisper window, long enough that a request is real work."""
CHUNK_S = 0.1
"""Seconds of audio per realtime append, sent when the audio is complete (as a microphone
delivers it). 100 ms rather than streaming_capacity's 20 ms: dozens of paced sessions share the
client's process with the server on a small machine, and 5x fewer messages keeps the client cheap."""
CLIENT_TIMEOUT_S = 300.0
"""Seconds a client waits for any one answer: far over the admission limit (30 s by default), so a
request that ends in a timeout is lost by the server, not given up on by the client."""
SURFACES = ("http", "grpc", "realtime")
ALONE_RUNS = 3  # times the clip is transcribed alone on each surface (processing time p50)
LIVE_STAGGER_S = 0.25  # start offset between the pre-admitted live sessions
MONITOR_PERIOD_S = 1.0  # seconds between reads of the server's /readyz during the overload phase
SEED = 35  # the arrival process's random seed: runs offer the same schedule

Kind = Literal["served", "refused_hint", "refused_bare", "lost"]


@dataclass
class Outcome:
    kind: Kind
    latency_s: float  # from sending the request (opening the session) to its end
    text: str = ""
    detail: str = ""  # the status and message of a refusal or a loss
    retry_after_s: float | None = None  # a refusal's hint: Retry-After, or gRPC pushback over 1000
    sent_at: float = float("nan")  # time.perf_counter() when it was sent (for --trace)


class Surfaces:
    """One client per surface, shared by all threads (httpx clients and gRPC channels multiplex)."""

    def __init__(self, server: ServerProcess, audio: np.ndarray, timeout_s: float) -> None:
        from protos.oasr.speech.v1 import speech_pb2, speech_pb2_grpc

        self.base_url = server.base_url
        self.audio = audio
        self.timeout_s = timeout_s
        self._wav = to_wav_bytes(audio)
        # no pool limit: an open loop must never queue a request in the client
        self._http = httpx.Client(base_url=server.base_url, timeout=timeout_s,
                                  limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        self._channel = grpc.insecure_channel(server.grpc_target,
                                              options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
        self._stub = speech_pb2_grpc.SpeechStub(self._channel)
        self._request = speech_pb2.RecognizeRequest(
            config=speech_pb2.RecognitionConfig(encoding=speech_pb2.RecognitionConfig.WAV, language_code="en-US"),
            audio=speech_pb2.RecognitionAudio(content=self._wav))

    def close(self) -> None:
        self._http.close()
        self._channel.close()

    def call(self, surface: str) -> Outcome:
        return {"http": self.http, "grpc": self.grpc, "realtime": self.realtime}[surface]()

    def http(self) -> Outcome:
        start = time.perf_counter()
        try:
            r = self._http.post("/v1/audio/transcriptions", files={"file": ("clip.wav", self._wav, "audio/wav")})
        except httpx.HTTPError as exc:
            return Outcome("lost", time.perf_counter() - start, detail=f"{type(exc).__name__}: {exc}")
        latency = time.perf_counter() - start
        if r.status_code == 200:
            return Outcome("served", latency, text=r.json()["text"])
        detail = f"HTTP {r.status_code}: {r.text[:200]}"
        if r.status_code in (429, 503):
            return _refusal(latency, detail, r.headers.get("retry-after"), 1.0)
        return Outcome("lost", latency, detail=detail)

    def grpc(self) -> Outcome:
        start = time.perf_counter()
        try:
            response = self._stub.Recognize(self._request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            latency = time.perf_counter() - start
            code = exc.code()  # type: ignore[attr-defined]
            detail = f"gRPC {code.name}: {exc.details()}"  # type: ignore[attr-defined]
            if code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                pushback = dict(exc.trailing_metadata() or ()).get("grpc-retry-pushback-ms")  # type: ignore[attr-defined]
                return _refusal(latency, detail, pushback, 1000.0)
            return Outcome("lost", latency, detail=detail)
        text = " ".join(r.alternatives[0].transcript.strip() for r in response.results if r.alternatives).strip()
        return Outcome("served", time.perf_counter() - start, text=text)

    def realtime(self) -> Outcome:
        """A new session streaming the clip at real time, one turn ended by the client's commit."""
        from websockets.exceptions import InvalidStatus

        start = time.perf_counter()
        try:
            stream = RealtimeStream(self.base_url, model="", turn_detection="none")
        except InvalidStatus as exc:  # the upgrade was refused with an HTTP status
            status, headers = exc.response.status_code, exc.response.headers
            detail = f"HTTP {status} on the upgrade: {bytes(exc.response.body).decode(errors='replace')[:200]}"
            if status in (429, 503):
                return _refusal(time.perf_counter() - start, detail, headers.get("retry-after"), 1.0)
            return Outcome("lost", time.perf_counter() - start, detail=detail)
        except Exception as exc:  # no connection at all: the server lost it
            return Outcome("lost", time.perf_counter() - start, detail=f"{type(exc).__name__}: {exc}")
        try:
            send_paced(stream, self.audio, time.perf_counter())
            stream.close_input()
            text = stream.result(self.timeout_s)
        except Exception as exc:  # a session that failed after it was admitted is lost, never refused
            stream.abort()
            return Outcome("lost", time.perf_counter() - start, detail=f"{type(exc).__name__}: {exc}")
        assert stream.final_t is not None
        return Outcome("served", stream.final_t - start, text=text)


def _refusal(latency: float, detail: str, hint: str | None, per_second: float) -> Outcome:
    """A refusal, with its retry hint when it carries one: a non-negative integer (Retry-After in
    seconds, `per_second` 1; gRPC pushback in milliseconds, `per_second` 1000)."""
    if hint is None or not hint.strip().isdigit():
        return Outcome("refused_bare", latency, detail=detail)
    return Outcome("refused_hint", latency, detail=detail, retry_after_s=int(hint) / per_second)


def send_paced(stream: RealtimeStream, audio: np.ndarray, start: float) -> float:
    """Send `audio` as a microphone would, each CHUNK_S chunk once its audio is complete;
    returns the perf_counter() time of the audio's end."""
    chunk = int(CHUNK_S * SAMPLE_RATE)
    for off in range(0, audio.size, chunk):
        piece = audio[off : off + chunk]
        time.sleep(max(0.0, start + (off + piece.size) / SAMPLE_RATE - time.perf_counter()))
        stream.send(piece)
    return start + audio.size / SAMPLE_RATE


# ---------------------------------------------------------------------------------------- live sessions

class TurnStream(RealtimeStream):
    """A realtime session whose client commits a turn whenever it likes (turn detection none)."""

    def commit(self) -> None:
        self._send({"type": "input_audio_buffer.commit"})


@dataclass
class LiveResult:
    refused: str | None = None  # why the session was not admitted
    failed: str | None = None  # why an admitted session ended without all its finals
    finals: list[float] = field(default_factory=list)  # per turn: commit -> completed transcript, s


def live_turns(index: int, seconds: float) -> list[np.ndarray]:
    """Session `index`'s turns (PAUSE_S of silence, then a dev clip), cycling through its share of
    streaming_capacity's clip pool until they cover `seconds`."""
    pool = [cid for ids in session_clips(64) for cid in ids]
    pause = np.zeros(int(PAUSE_S * SAMPLE_RATE), dtype=np.float32)
    turns: list[np.ndarray] = []
    k = 3 * index
    while sum(t.size for t in turns) < seconds * SAMPLE_RATE:
        turns.append(np.concatenate([pause, load(pool[k % len(pool)])]))
        k += 1
    return turns


def run_live(base_url: str, turns: list[np.ndarray], admitted: threading.Event, timeout_s: float) -> LiveResult:
    """One pre-admitted session: stream the turns at real time, committing each at its audio's end;
    a turn's final latency runs from that end to its `completed` transcript."""
    from websockets.exceptions import InvalidStatus

    result = LiveResult()
    try:
        stream = TurnStream(base_url, model="", turn_detection="none")
    except InvalidStatus as exc:
        status, retry = exc.response.status_code, exc.response.headers.get("retry-after")
        if status == 503 and retry:  # the live gate: the sessions already admitted take the engine
            result.refused = f"HTTP 503 on the upgrade, Retry-After {retry}"
        else:
            result.failed = f"HTTP {status} on the upgrade (Retry-After {retry})"
        return result
    except Exception as exc:
        result.failed = f"{type(exc).__name__}: {exc}"
        return result
    finally:
        admitted.set()
    ends: list[float] = []
    try:
        start = time.perf_counter()
        for k, turn in enumerate(turns):
            start = send_paced(stream, turn, start)
            ends.append(start)
            if k < len(turns) - 1:
                stream.commit()
            if stream.error is not None:
                break
        stream.close_input()
        stream.result(timeout_s)
    except Exception as exc:
        stream.abort()
        result.failed = f"{type(exc).__name__}: {exc}"
    done = [t for _, t in stream.turn_ends()]
    result.finals = [t - end for end, t in zip(ends, done, strict=False)]
    if result.failed is None and len(done) != len(turns):
        result.failed = f"{len(done)} finals for {len(turns)} committed turns"
    return result


# ---------------------------------------------------------------------------------------- phases

def time_alone(surfaces: Surfaces, runs: int, names: tuple[str, ...]) -> dict[str, Outcome]:
    """Each named surface's median outcome over `runs` requests sent one at a time on an idle server."""
    alone: dict[str, Outcome] = {}
    for surface in names:
        outs = [surfaces.call(surface) for _ in range(runs)]
        bad = [o for o in outs if o.kind != "served"]
        if bad:
            raise RuntimeError(f"{surface}: the clip alone was not served: {bad[0].detail}")
        alone[surface] = sorted(outs, key=lambda o: o.latency_s)[len(outs) // 2]
    return alone


def measure_capacity(surfaces: Surfaces, concurrency: int, seconds: float) -> dict[str, float]:
    """A closed loop of `concurrency` REST uploads for `seconds` (no new one starts after that; the
    ones in flight finish): served requests over the time until the last one was served. A
    refused upload waits out its Retry-After, as a client should: with a small
    max_queue_delay_secs the loop then measures the rate the limit lets through."""
    t0 = time.perf_counter()
    deadline = t0 + seconds
    ends: list[float] = []
    failures: list[str] = []
    refused = 0
    lock = threading.Lock()

    def worker() -> None:
        nonlocal refused
        while time.perf_counter() < deadline:
            out = surfaces.http()
            with lock:
                if out.kind == "served":
                    ends.append(time.perf_counter())
                elif out.retry_after_s is not None:
                    refused += 1
                else:
                    failures.append(out.detail)
            if out.retry_after_s is not None:
                time.sleep(min(out.retry_after_s, max(0.0, deadline - time.perf_counter())))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failures or not ends:
        raise RuntimeError(f"capacity: {len(failures)} of {len(failures) + len(ends)} uploads not served: "
                           f"{failures[0] if failures else 'none finished'}")
    wall = max(ends) - t0
    rate = len(ends) / wall
    clip_s = surfaces.audio.size / SAMPLE_RATE
    return {"requests": len(ends), "wall_s": round(wall, 2), "requests_per_s": round(rate, 3),
            "audio_s_per_s": round(rate * clip_s, 2), "concurrency": concurrency, "refused": refused}


def arrival_times(rate_per_s: float, seconds: float, process: str, seed: int = SEED) -> list[float]:
    """Offsets (s) of an open-loop arrival process of mean rate `rate_per_s` over `seconds`:
    exponential gaps (Poisson) or even ones (uniform)."""
    if rate_per_s <= 0:
        return []
    if process == "uniform":
        return [k / rate_per_s for k in range(int(seconds * rate_per_s))]
    rng = random.Random(seed)
    times, t = [], rng.expovariate(rate_per_s)
    while t < seconds:
        times.append(t)
        t += rng.expovariate(rate_per_s)
    return times


def offer(surfaces: Surfaces, times: list[float], names: tuple[str, ...]) -> dict[str, list[Outcome]]:
    """Send request k at times[k] (from now) on names[k % len(names)], each from its own thread so
    a slow answer never delays the next arrival; wait for every one to end."""
    outcomes: dict[str, list[Outcome]] = {s: [] for s in names}
    lock = threading.Lock()

    def one(surface: str) -> None:
        sent_at = time.perf_counter()
        try:
            out = surfaces.call(surface)
        except Exception as exc:  # a client bug must still be accounted for, as a loss
            out = Outcome("lost", float("nan"), detail=f"client: {type(exc).__name__}: {exc}")
        out.sent_at = sent_at
        with lock:
            outcomes[surface].append(out)

    t0 = time.perf_counter()
    threads = []
    for k, at in enumerate(times):
        time.sleep(max(0.0, t0 + at - time.perf_counter()))
        th = threading.Thread(target=one, args=(names[k % len(names)],), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    return outcomes


class ReadyMonitor:
    """Reads the server's /readyz every MONITOR_PERIOD_S from its own thread: the admission's own
    view (its queue-delay estimate, the offline backlog, permits in flight) to set beside what
    the clients saw. A read that times out is skipped: a busy event loop is part of the story."""

    def __init__(self, base_url: str) -> None:
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._base_url = base_url
        self._thread = threading.Thread(target=self._run, name="readyz", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self._base_url, timeout=5.0) as client:
            while not self._stop.wait(MONITOR_PERIOD_S):
                try:
                    self.samples.append({**client.get("/readyz").json(), "at": time.perf_counter()})
                except (httpx.HTTPError, ValueError):
                    continue

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return monitor_row(self.samples)


def monitor_row(samples: list[dict[str, Any]]) -> dict[str, Any]:
    delays = [float(s["queue_delay_s"]) for s in samples]
    shares = [float(s["live_engine_share"]) for s in samples if "live_engine_share" in s]
    return {
        "surface": "server (/readyz)",
        "samples": len(samples),
        "not_ready": sum(not s["ready"] for s in samples),
        "inflight_max": max((int(s["inflight"]) for s in samples), default=0),
        "queue_delay_estimate_p50_s": round(statistics.median(delays), 1) if delays else float("nan"),
        "queue_delay_estimate_max_s": round(max(delays), 1) if delays else float("nan"),
        "backlog_audio_max_s": round(max((float(s["backlog_audio_s"]) for s in samples), default=0.0), 1),
        "live_engine_share_p50": round(statistics.median(shares), 2) if shares else float("nan"),
    }


# ---------------------------------------------------------------------------------------- report

def surface_row(surface: str, offered: int, outs: list[Outcome], alone: Outcome,
                max_queue_delay_s: float) -> dict[str, Any]:
    """One surface's accounting: every offered request in exactly one outcome."""
    served = [o for o in outs if o.kind == "served"]
    lat = [o.latency_s for o in served]
    processing = alone.latency_s
    p99 = percentile(lat, 0.99) if lat else float("nan")
    lost = [o for o in outs if o.kind == "lost"]
    bare = [o for o in outs if o.kind == "refused_bare"]
    hints = [o.retry_after_s for o in outs if o.retry_after_s is not None]
    return {
        "surface": surface,
        "offered": offered,
        "served": len(served),
        "refused_with_retry": sum(o.kind == "refused_hint" for o in outs),
        "refused_without_retry": len(bare),
        "retry_after_p50_s": statistics.median(hints) if hints else None,
        "retry_after_max_s": max(hints, default=None),
        "lost": len(lost) + offered - len(outs),  # an offered request with no outcome is lost too
        "served_same_text_as_alone": sum(o.text == alone.text for o in served),
        "accepted_p50_s": round(statistics.median(lat), 2) if lat else float("nan"),
        "accepted_p95_s": round(percentile(lat, 0.95), 2) if lat else float("nan"),
        "accepted_p99_s": round(p99, 2) if lat else float("nan"),
        "processing_alone_p50_s": round(processing, 2),
        "p99_within_limit": bool(lat) and p99 <= max_queue_delay_s + processing,
        "examples": sorted({o.detail for o in lost + bare})[:3],
        "alone_text": alone.text,
        "other_text_example": next((o.text for o in served if o.text != alone.text), None),
    }


def live_row(results: list[LiveResult]) -> dict[str, Any]:
    finals = [f for r in results for f in r.finals]
    p95 = percentile(finals, 0.95) if finals else float("nan")
    return {
        "surface": "live (pre-admitted)",
        "sessions": len(results),
        "refused": sum(r.refused is not None for r in results),
        "failed": sum(r.failed is not None for r in results),
        "turns": len(finals),
        "final_p50_s": round(statistics.median(finals), 3) if finals else float("nan"),
        "final_p95_s": round(p95, 3) if finals else float("nan"),
        "keeps_up": bool(finals) and p95 <= KEEPS_UP_P95_S,
        "examples": sorted({r.refused or r.failed or "" for r in results} - {""})[:3],
    }


def hard_failures(rows: list[dict[str, Any]]) -> list[str]:
    """The admission contract's violations: losses, refusals without a retry hint, admitted live
    sessions shed (a session refused at its opening with a Retry-After, because the ones already
    admitted take the engine, is the live gate working: `live_row` counts those)."""
    out = []
    for r in rows:
        if "offered" in r:
            if r["lost"]:
                out.append(f"{r['surface']}: {r['lost']} lost")
            if r["refused_without_retry"]:
                out.append(f"{r['surface']}: {r['refused_without_retry']} refused without a retry hint")
        elif "sessions" in r and r["failed"]:
            out.append(f"{r['surface']}: {r['failed']} admitted and then failed")
    return out


def _hints(row: dict[str, Any]) -> str:
    if row["retry_after_max_s"] is None:
        return ""
    return f" (wait p50 {row['retry_after_p50_s']:g} s, max {row['retry_after_max_s']:g} s)"


def markdown(rows: list[dict[str, Any]], max_queue_delay_s: float) -> str:
    lines = [f"| surface | offered | served | refused + Retry-After/pushback | refused without | lost | "
             f"accepted p50 / p95 / p99 s | alone p50 s | p99 ≤ {max_queue_delay_s:g} s + alone |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "offered" in r:
            lines.append(f"| {r['surface']} | {r['offered']} | {r['served']} | {r['refused_with_retry']}{_hints(r)} | "
                         f"{r['refused_without_retry']} | {r['lost']} | {r['accepted_p50_s']} / {r['accepted_p95_s']} / "
                         f"{r['accepted_p99_s']} | {r['processing_alone_p50_s']} | {r['p99_within_limit']} |")
    for r in rows:
        if "samples" in r:
            lines.append(f"\n{r['surface']}: {r['samples']} reads, {r['not_ready']} not ready; most permits in flight "
                         f"{r['inflight_max']}; queue-delay estimate p50 {r['queue_delay_estimate_p50_s']} s, "
                         f"max {r['queue_delay_estimate_max_s']} s; offline backlog at most "
                         f"{r['backlog_audio_max_s']} audio-s; live streams' share of engine time p50 "
                         f"{r['live_engine_share_p50']}")
        if "sessions" in r:
            lines.append(f"\n{r['surface']}: {r['sessions']} sessions, {r['refused']} refused, {r['failed']} failed; "
                         f"{r['turns']} turns, final p50 {r['final_p50_s']} s, p95 {r['final_p95_s']} s "
                         f"(≤ {KEEPS_UP_P95_S} s: {r['keeps_up']})")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- driver

@dataclass
class Plan:
    duration_s: float = 60.0
    factor: float = 3.0
    max_queue_delay_secs: float | None = None  # None: the server's default
    live_sessions: int = 16
    capacity_s: float = 15.0
    capacity_concurrency: int = 8
    arrivals: str = "poisson"
    surfaces: tuple[str, ...] = SURFACES  # those the offered load is dealt to, in turn
    clip: str = CLIP
    clip_seconds: float | None = None  # the clip's first seconds only (a quicker smoke run)
    alone_runs: int = ALONE_RUNS
    client_timeout_s: float = CLIENT_TIMEOUT_S
    env: dict[str, str] = field(default_factory=dict)  # more OASR_* settings for the server


def run(plan: Plan, on_phase: Callable[[str], None] = logger.info) -> dict[str, Any]:
    """The whole benchmark against a fresh server; returns the capacity, the rows and the
    hard-requirement failures (empty when the contract held)."""
    audio = load(plan.clip)
    if plan.clip_seconds is not None:
        audio = audio[: int(plan.clip_seconds * SAMPLE_RATE)]
    env = {"OASR_SERVICE_MODE": "streaming", "OASR_LOG_LEVEL": "warning", **plan.env}
    if plan.max_queue_delay_secs is not None:
        env["OASR_MAX_QUEUE_DELAY_SECS"] = str(plan.max_queue_delay_secs)
    server = ServerProcess(env, startup_timeout_s=300.0)
    surfaces = Surfaces(server, audio, plan.client_timeout_s)
    try:
        limit = float(httpx.get(f"{server.base_url}/readyz", timeout=10.0).json()
                      .get("max_queue_delay_s", plan.max_queue_delay_secs or 0.0))
        on_phase("warm-up and the clip alone")
        surfaces.http()  # the first request pays for lazy initialisation
        alone = time_alone(surfaces, plan.alone_runs, plan.surfaces)
        on_phase("capacity")
        capacity = measure_capacity(surfaces, plan.capacity_concurrency, plan.capacity_s)
        on_phase(f"capacity {capacity['requests_per_s']} requests/s; admitting {plan.live_sessions} live sessions")
        live: list[LiveResult] = [LiveResult() for _ in range(plan.live_sessions)]
        lead_s = plan.live_sessions * LIVE_STAGGER_S + 1.0
        threads = []
        for k in range(plan.live_sessions):
            admitted = threading.Event()
            turns = live_turns(k, plan.duration_s + lead_s - k * LIVE_STAGGER_S)

            def session(k: int = k, turns: list[np.ndarray] = turns, admitted: threading.Event = admitted) -> None:
                live[k] = run_live(server.base_url, turns, admitted, plan.client_timeout_s)

            th = threading.Thread(target=session, daemon=True)
            th.start()
            threads.append(th)
            admitted.wait(60.0)
            time.sleep(LIVE_STAGGER_S)
        times = arrival_times(plan.factor * capacity["requests_per_s"], plan.duration_s, plan.arrivals)
        on_phase(f"offering {len(times)} requests over {plan.duration_s:g} s ({plan.factor:g}x capacity)")
        monitor = ReadyMonitor(server.base_url)
        outcomes = offer(surfaces, times, plan.surfaces)
        for th in threads:
            th.join()
        server_row = monitor.stop()
        trace = {"outcomes": {s: [dataclasses.asdict(o) for o in outs] for s, outs in outcomes.items()},
                 "readyz": monitor.samples}
    finally:
        surfaces.close()
        server.stop()
    names = plan.surfaces
    offered = {s: sum(1 for k in range(len(times)) if names[k % len(names)] == s) for s in names}
    rows = [surface_row(s, offered[s], outcomes[s], alone[s], limit) for s in names]
    rows += [live_row(live), server_row]
    return {"capacity": capacity, "max_queue_delay_s": limit, "factor": plan.factor, "duration_s": plan.duration_s,
            "arrivals": plan.arrivals, "offered": len(times), "clip": plan.clip, "clip_s": round(audio.size / SAMPLE_RATE, 2),
            "rows": rows, "failures": hard_failures(rows), "trace": trace}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=60.0, help="seconds of offered overload")
    parser.add_argument("--factor", type=float, default=3.0, help="offered rate over the measured capacity")
    parser.add_argument("--max-queue-delay-secs", type=float, default=None,
                        help="the server's OASR_MAX_QUEUE_DELAY_SECS, seconds (default: the server's, 30)")
    parser.add_argument("--live-sessions", type=int, default=16, help="realtime sessions admitted before the load")
    parser.add_argument("--capacity-s", type=float, default=15.0, help="seconds of the closed capacity loop")
    parser.add_argument("--capacity-concurrency", type=int, default=8, help="uploads in flight in the capacity loop")
    parser.add_argument("--arrivals", choices=["poisson", "uniform"], default="poisson")
    parser.add_argument("--surfaces", nargs="+", choices=SURFACES, default=list(SURFACES),
                        help="the surfaces the offered load is dealt to, in turn (default: all three)")
    parser.add_argument("--clip", default=CLIP, help="dev clip id every request sends")
    parser.add_argument("--trace", default=None, metavar="PATH",
                        help="write every offered request's outcome (sent_at, latency) and the /readyz samples as JSON")
    parser.add_argument("--server-env", nargs="*", default=[], metavar="OASR_X=VALUE",
                        help="more settings for the server, e.g. OASR_MAX_WAIT_TIME=60")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    result = run(Plan(duration_s=args.duration_s, factor=args.factor, max_queue_delay_secs=args.max_queue_delay_secs,
                      live_sessions=args.live_sessions, capacity_s=args.capacity_s,
                      capacity_concurrency=args.capacity_concurrency, arrivals=args.arrivals,
                      surfaces=tuple(args.surfaces), clip=args.clip,
                      env=dict(pair.split("=", 1) for pair in args.server_env)))
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(result["trace"], f)
    for row in result["rows"]:
        print(json.dumps(row), flush=True)
    cap = result["capacity"]
    print(f"\nclip {result['clip']} ({result['clip_s']} s); capacity {cap['requests_per_s']} requests/s = "
          f"{cap['audio_s_per_s']} audio-s/s ({cap['concurrency']} concurrent uploads, {cap['requests']} in "
          f"{cap['wall_s']} s, {cap['refused']} refused); offered {result['factor']:g}x for {result['duration_s']:g} s ({result['arrivals']}); "
          f"max_queue_delay_secs {result['max_queue_delay_s']:g}\n")
    print(markdown(result["rows"], result["max_queue_delay_s"]))
    if result["failures"]:
        print("\nFAILED: " + "; ".join(result["failures"]), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()


__all__ = ["Outcome", "Plan", "arrival_times", "hard_failures", "live_row", "main", "run", "surface_row"]
