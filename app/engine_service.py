"""The bridge between the event loop and the engine thread.

Every surface (HTTP, WebSocket, gRPC) goes through `EngineService`: it registers a
per-request `OutputStream` on the event loop, then posts the command on the engine's one
command queue (add, feed, abort are queued and applied together between steps). A dedicated
thread blocks on that queue while idle, calls `engine.step()` while there is work, and hands
each step's outputs back to the loop in one `call_soon_threadsafe`, where they are routed by
request id. The engine thread never touches an asyncio object.

An exception escaping `engine.step()` (or anything else on the engine thread) ends the engine:
the thread owns the runner's state (KV blocks, decoder rows, stream caches), which a step that
raised halfway leaves unknown, and a CUDA error is sticky besides. Runners already contain the
per-request failures they can (a batch retried one by one); what still escapes is not one
request's fault. So the service marks itself dead (readiness false at once), ends every open
request as a lost engine (stage 'shutdown': 503 / UNAVAILABLE, retryable; jobs go back to the
queue) and calls `on_death`, which makes the server drain and exit with ENGINE_DIED_EXIT_CODE so
that Kubernetes restarts the pod with a fresh engine (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.admission import Admission
from app.backlog import Backlog, live_engine_seconds
from app.engine_metrics import ENGINE_NAME, EngineSeries
from app.metrics import Metrics
from app.output_stream import OutputStream
from engine import ASREngine, DecodingOptions, RequestOutput
from engine.device import resolve_device
from engine.errors import (
    EngineError,
    EngineShutdownError,
    InvalidRequestError,
    UnknownRequestError,
    UnsupportedError,
)
from engine.loop import LoopObserver, drive

logger = logging.getLogger(__name__)

HEARTBEAT_MAX_AGE_S = 5.0  # readiness fails when the engine thread has not beaten for this long
STUCK_STEP_S = 120.0  # ...unless it is inside a step younger than this (one long batch is not a hang)
IDLE_WAIT_S = 1.0  # the engine thread wakes this often while idle, to beat (well inside HEARTBEAT_MAX_AGE_S)
LIVE_POST_PERIOD_S = 0.25  # steps without outputs hand their live time to the loop at most this often
STOP_JOIN_S = 45.0  # how long stop() waits for the step in progress (inside the pod's 60 s grace after the drain)
ENGINE_DIED_EXIT_CODE = 70  # sysexits' EX_SOFTWARE: the server exits with it when its engine thread died


@dataclass
class _HeldStream:
    """A live stream on an engine that serves offline requests only: the bridge holds its audio
    and submits one offline request when the input ends (seed 001, "Streaming text out of an
    offline engine")."""

    decoding: DecodingOptions
    priority: int
    chunks: list[np.ndarray] = field(default_factory=list)
    samples: int = 0


class EngineService:
    def __init__(self, engine: ASREngine, metrics: Metrics, max_inflight: int = 64,
                 max_held_seconds: float = 3600.0, max_queue_delay_secs: float = 0.0, engine_label: str = ENGINE_NAME):
        self.engine = engine
        self.metrics = metrics
        info = engine.model_info
        self.series = EngineSeries(metrics, info.model, info.decode_method, resolve_device(engine.config),
                                   engine=engine_label)
        """This engine's dispatcher and engine-scope metrics."""
        self.max_held_seconds = max_held_seconds
        """Most audio (s) held for one live stream on an offline engine (the server's max_audio_seconds)."""
        self.admission = Admission(max_inflight, max_queue_delay_secs, on_busy=self.series.requests_busy.inc)
        """Whether this engine takes new work, and its permits (app/admission.py)."""
        self._held: dict[str, _HeldStream] = {}
        self._closed = False  # set by cancel_all: from then on no request may enter the engine
        self._streams: dict[str, OutputStream] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._heartbeat = 0.0
        self._steps_done = 0
        self._step_started: float | None = None
        self._tick_started = 0.0
        self._live_s = 0.0  # engine thread: live streams' engine time not yet handed to the backlog
        self._shed_new = 0  # engine thread: live passes shed not yet handed to the backlog
        self._posted_at = 0.0  # engine thread: perf_counter() of the last hand-over to the loop
        self._live_streams = 0  # engine thread: live streams the runner held after the last step
        self._started = threading.Event()
        self.death: str | None = None
        """Why the engine thread died (None while it runs): written once by that thread."""
        self.on_death: Callable[[str], None] | None = None
        """Called on the event loop once every open request was ended after the engine died
        (the server drains and exits non-zero: app/main.py)."""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="oasr-engine", daemon=True)
        self._thread.start()

    async def wait_started(self, timeout: float = 120.0) -> bool:
        return await asyncio.to_thread(self._started.wait, timeout)

    @property
    def ready(self) -> bool:
        now = time.monotonic()
        fresh = now - self._heartbeat <= HEARTBEAT_MAX_AGE_S
        if not fresh and self._step_started is not None:
            fresh = now - self._step_started <= STUCK_STEP_S
        return (self._steps_done > 0 and fresh and not self.admission.draining and not self._stop.is_set()
                and self.death is None)

    def readiness(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "draining": self.admission.draining,
            "steps": self._steps_done,
            "heartbeat_age_s": round(time.monotonic() - self._heartbeat, 3) if self._heartbeat else None,
            "engine_died": self.death,
            "running": self.engine.num_running,
            "waiting": self.engine.num_waiting,
            "inflight": self.admission.inflight,
            "queue_delay_s": round(self.backlog.delay(), 3),
            "backlog_audio_s": round(self.backlog.seconds, 3),
            "live_engine_share": round(self.backlog.current_live_share(), 3),
            "live_sessions_held": self.admission.live.held,
            "max_queue_delay_s": self.admission.max_queue_delay_secs,
        }

    def stop(self) -> None:
        self._stop.set()
        self.engine.wake()  # the thread's blocking wait returns; it sees the stop and ends
        if self._thread is not None:
            # the step in progress runs to its end (its requests were cancelled: it is the last);
            # leaving it running while the interpreter exits aborts the process mid-kernel
            self._thread.join(timeout=STOP_JOIN_S)
            if self._thread.is_alive():  # a hung step: the engine is still in use, do not free it
                logger.error("engine thread still stepping after %g s; exiting without shutting the engine down",
                             STOP_JOIN_S)
                return
        self.engine.shutdown()

    # ------------------------------------------------------------------ admission

    @property
    def backlog(self) -> Backlog:
        return self.admission.backlog

    @property
    def busy(self) -> bool:
        """Something still holds this engine: a permit, an open request, or held live audio (its
        model must not be unloaded: app/model_pool.py)."""
        return self.admission.inflight > 0 or bool(self._streams) or bool(self._held)

    def validate_options(self, decoding: DecodingOptions | None, streaming: bool = False) -> DecodingOptions:
        """The engine's admission of a request's options (app/requests.py), counted as rejected
        when refused: a surface checks them before it decodes the audio or opens the request."""
        try:
            return self.engine.validate_options(decoding, streaming)
        except (InvalidRequestError, UnsupportedError):
            self.series.requests_rejected.inc()
            raise

    def _track(self, request_id: str, samples: int, priority: int) -> None:
        self.backlog.add(request_id, samples / self.engine.sample_rate, priority)
        self.series.queue_delay.set(self.backlog.delay())

    def open_request(
        self,
        audio: np.ndarray | None,
        *,
        streaming: bool = False,
        decoding: DecodingOptions | None = None,
        priority: int = 0,
        request_id: str | None = None,
    ) -> OutputStream:
        """Register a stream for a new request and post it. Raises the engine's validation
        errors (InvalidRequestError, UnsupportedError, EngineShutdownError) synchronously.

        A streaming request on an engine that serves offline requests only is held here: its
        audio is kept until the input ends and then submitted as one offline request under the
        same id, so every surface streams the same way on either kind of engine."""
        if self._closed:
            # A handler that held a permit through the drain grace (still decoding its upload)
            # must not start engine work after the rest was cancelled: shutdown would wait on it.
            raise EngineShutdownError("server is shutting down; the request was not started")
        try:
            with self.series.admit.time():  # each command's check and post is timed (open, feed, abort)
                if streaming and not self.engine.streaming_enabled:
                    options = self.engine.validate_options(decoding)
                    rid = request_id or f"held-{uuid.uuid4().hex[:12]}"
                    self._held[rid] = _HeldStream(options, priority)
                elif streaming:
                    rid = self.engine.add_streaming_request(priority=priority, decoding=decoding,
                                                            request_id=request_id)
                else:
                    rid = self.engine.add_request(audio, priority=priority, decoding=decoding, request_id=request_id)
                    self._track(rid, 0 if audio is None else int(audio.size), priority)
        except (InvalidRequestError, UnsupportedError):
            self.series.requests_rejected.inc()
            raise
        # outputs are dispatched on this loop after this callback returns, so registering now is in time
        stream = OutputStream(rid, self.series)
        self._streams[rid] = stream
        self.series.requests_admitted.inc()
        return stream

    def feed(self, request_id: str, chunk: np.ndarray, is_last: bool = False) -> None:
        held = self._held.get(request_id)
        if held is None:
            with self.series.admit.time():
                self.engine.feed_chunk(request_id, chunk, is_last=is_last)
            return
        if chunk.size:
            held.chunks.append(chunk)
            held.samples += int(chunk.size)
        if held.samples > self.max_held_seconds * self.engine.sample_rate:
            self._end_held(request_id, RequestOutput(
                request_id, finished=True, finish_reason="error", error_stage="admission",
                error=f"live audio over {self.max_held_seconds:g} s cannot be held for an offline engine"))
        elif is_last:
            self._submit_held(request_id, held)

    def _submit_held(self, request_id: str, held: _HeldStream) -> None:
        del self._held[request_id]
        if not held.samples:  # nothing was said: nothing to transcribe
            self._put(RequestOutput(request_id, finished=True, finish_reason="stop"))
            return
        audio = np.concatenate(held.chunks)
        try:
            self.engine.add_request(audio, priority=held.priority, decoding=held.decoding, request_id=request_id)
            self._track(request_id, int(audio.size), held.priority)
        except EngineError as exc:  # e.g. shut down meanwhile: the stream ends with the reason
            self._put(RequestOutput(request_id, finished=True, finish_reason="error", error=str(exc),
                                    error_stage="admission"))

    def _end_held(self, request_id: str, out: RequestOutput) -> None:
        self._held.pop(request_id, None)
        self._put(out)

    def _put(self, out: RequestOutput) -> None:
        stream = self._streams.get(out.request_id)
        if stream is not None:
            stream.put(out)

    def abort(self, request_id: str) -> None:
        """Cancel a request if it is still running (idempotent)."""
        stream = self._streams.get(request_id)
        if stream is None or stream.finished:
            return
        if request_id in self._held:
            self._end_held(request_id, RequestOutput(request_id, finished=True, finish_reason="abort"))
            return
        with self.series.admit.time(), contextlib.suppress(UnknownRequestError):
            self.engine.abort_request(request_id)

    def close(self, request_id: str) -> None:
        """Forget a request's stream (its handler is done with it); aborts it if still running."""
        self.abort(request_id)
        self._streams.pop(request_id, None)

    async def cancel_all(self, reason: str) -> None:
        """Shutdown: end every open request with an error output and abort it in the engine;
        requests opened after this are refused."""
        self._closed = True
        for rid, stream in list(self._streams.items()):
            if not stream.finished:
                self._held.pop(rid, None)
                self.abort(rid)
                stream.put(RequestOutput(request_id=rid, finished=True, finish_reason="error", error=reason,
                                         error_stage="shutdown"))

    # ------------------------------------------------------------------ engine thread

    def _beat(self) -> None:
        self._heartbeat = time.monotonic()
        self.series.beat(heartbeat=True)

    def _run(self) -> None:
        try:
            try:
                self.engine.step()  # first step after start-up: readiness needs one
                self._steps_done += 1
                self._beat()
            finally:
                self._started.set()
            self._loop_steps()
        except BaseException as exc:  # the thread ends here: nothing may leave its requests hanging
            if self._stop.is_set():  # shutting down: the engine was shut under a step
                logger.info("engine thread ended during shutdown: %r", exc)
                return
            if isinstance(exc, Exception):
                self.series.step_failures.inc()
            self._die(f"engine thread died: {type(exc).__name__}: {exc}")
            if not isinstance(exc, Exception):
                raise

    def _die(self, reason: str) -> None:
        """Engine thread: mark the engine dead and have the loop end every open request."""
        logger.critical("%s; every open request ends as UNAVAILABLE and the server exits", reason, exc_info=True)
        self.death = reason  # readiness reads it: false from now on
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
                self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._after_death(reason)))

    async def _after_death(self, reason: str) -> None:
        await self.cancel_all(reason)
        if self.on_death is not None:
            self.on_death(reason)

    def _loop_steps(self) -> None:
        """Drive the engine until stopped; a step that raises ends the thread (`_ThreadObserver`)."""
        drive(self.engine, self._deliver, stop=self._stop.is_set, observer=_ThreadObserver(self),
              idle_wait_s=IDLE_WAIT_S)

    def _deliver(self, outputs: list[RequestOutput]) -> bool:
        """After each step (engine thread): its metrics, then its outputs to the event loop; False
        once the loop is closed (shutdown), which ends the thread."""
        stepped = time.perf_counter()
        try:
            self._observe_step(stepped - self._tick_started)
        except Exception:  # metrics are best effort: the step's outputs must still reach their clients
            logger.exception("recording the metrics of an engine step failed")
        posted = self._post(outputs)
        done = time.perf_counter()
        self.series.extract.observe(done - stepped)
        self.series.tick.observe(done - self._tick_started)
        self._beat()
        return posted

    def _observe_step(self, seconds: float) -> None:
        e = self.engine
        self.series.step.observe(seconds)
        snapshot, stats = e.metrics.drain(), e.runner.stats()
        self._live_s += live_engine_seconds(snapshot.stage_seconds)
        self._live_streams = stats.streams
        self._shed_new += self.series.export(snapshot, stats, e.num_running, e.num_waiting)

    def _post(self, outputs: list[RequestOutput], idle: bool = False) -> bool:
        """Hand a step's outputs to the event loop; False once the loop is closed (shutdown)."""
        now = time.perf_counter()
        # live time goes over without outputs too (a saturated Whisper engine holds partials back
        # while finals decode), and an idle engine says so, so that the measured live share falls
        live_due = (self._live_s > 0 or self._shed_new or idle) and now - self._posted_at >= LIVE_POST_PERIOD_S
        if (outputs or live_due) and self._loop is not None:
            live_s, shed, self._live_s, self._shed_new, self._posted_at = self._live_s, self._shed_new, 0.0, 0, now
            try:
                self._loop.call_soon_threadsafe(self._dispatch, outputs, now, live_s, self._live_streams, shed)
            except RuntimeError:  # loop closed during shutdown
                return False
        return True

    def _dispatch(self, outputs: list[RequestOutput], sent_at: float, live_s: float = 0.0, streams: int = 0,
                  passes_shed: int = 0) -> None:
        for out in outputs:
            if out.finished and out.finish_reason in ("abort", "error"):
                self.backlog.forget(out.request_id)  # left without being transcribed: no progress
            else:  # offline partials report the audio decoded so far
                self.backlog.progress(out.request_id, out.duration, out.finished)
            stream = self._streams.get(out.request_id)
            if stream is None:
                continue  # its handler already left (disconnect); the engine was told to abort
            stream.put(out)
            if out.finished and out.finish_reason == "error":
                self.series.failed(out.error_stage or "unknown")
        # the engine time live streams took (offline work did not get it), and whether they are behind
        self.admission.observe(live_s, streams, passes_shed)  # one step's outputs, one throughput sample
        self.series.queue_delay.set(self.backlog.delay())
        self.series.route.observe(time.perf_counter() - sent_at)


class _ThreadObserver(LoopObserver):
    """The engine thread's view of its loop: heartbeats while idle, the step's start (readiness
    tells a long step from a stuck one), and a failed step re-raised: its exception ends the engine
    thread, which ends every open request and the process (EngineService._run)."""

    def __init__(self, service: EngineService) -> None:
        self.service = service

    def idle(self) -> None:
        self.service._beat()
        self.service._post([], idle=True)  # no live work meanwhile: the backlog's live share decays

    def step_started(self) -> None:
        s = self.service
        s._tick_started = time.perf_counter()
        s._step_started = time.monotonic()

    def step_failed(self, exc: Exception) -> None:
        raise exc

    def stepped(self, seconds: float, failed: bool) -> None:
        s = self.service
        s._step_started = None
        s._steps_done += 1
