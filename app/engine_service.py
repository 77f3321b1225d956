"""The bridge between the event loop and the engine thread.

Every surface (HTTP, WebSocket, gRPC) goes through `EngineService`: it registers a
per-request `OutputStream` on the event loop, then posts the command on the engine's one
command queue (add, feed, abort are queued and applied together between steps). The engine
thread (app/engine_thread.py) steps the engine and hands each step's outputs back to the loop,
where they are routed by request id and reported to admission (app/admission.py).

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
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.admission import Admission
from app.backlog import Backlog
from app.engine_metrics import ENGINE_NAME, EngineSeries
from app.engine_thread import EngineThread, StepReport
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

logger = logging.getLogger(__name__)

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
        self.admission = Admission(max_inflight, max_queue_delay_secs, on_busy=self.series.requests_busy.inc,
                                   streaming=engine.streaming_enabled)
        """Whether this engine takes new work, and its permits (app/admission.py)."""
        self._held: dict[str, _HeldStream] = {}
        self._closed = False  # set by cancel_all: from then on no request may enter the engine
        self._streams: dict[str, OutputStream] = {}
        self.thread = EngineThread(engine, self.series, self._dispatch, self._died)
        self._death_task: asyncio.Future[None] | None = None
        self.on_death: Callable[[str], None] | None = None
        """Called on the event loop once every open request was ended after the engine died
        (the server drains and exits non-zero: app/main.py)."""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.thread.start(asyncio.get_running_loop())

    async def wait_started(self, timeout: float = 120.0) -> bool:
        return await self.thread.wait_started(timeout)

    @property
    def sample_rate(self) -> int:
        """Hz of the audio this engine's model takes: decoders resample to it, durations divide by it."""
        return self.engine.sample_rate

    @property
    def death(self) -> str | None:
        """Why the engine thread died (None while it runs)."""
        return self.thread.death

    @property
    def ready(self) -> bool:
        t = self.thread
        return t.steps_done > 0 and t.fresh() and not self.admission.draining and not t.stopping and t.death is None

    def readiness(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "draining": self.admission.draining,
            "steps": self.thread.steps_done,
            "consecutive_step_failures": self.thread.failures_in_a_row,
            "heartbeat_age_s": round(time.monotonic() - self.thread.heartbeat, 3) if self.thread.heartbeat else None,
            "engine_died": self.death,
            "running": self.engine.num_running,
            "waiting": self.engine.num_waiting,
            "inflight": self.admission.inflight,
            "queue_delay_s": round(self.backlog.delay(), 3),
            "backlog_audio_s": round(self.backlog.seconds, 3),
            "live_engine_share": round(self.backlog.current_live_share(), 3),
            "live_sessions_held": self.admission.live.held,
            "live_stream_cost": None if self.backlog.live_cost is None else round(self.backlog.live_cost, 4),
            "live_sessions_waiting": self.admission.live.waiting(),
            "max_queue_delay_s": self.admission.max_queue_delay_secs,
        }

    def stop(self) -> None:
        if self.thread.stop():  # a hung step still uses the engine: it is not freed under it
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
        self.backlog.add(request_id, samples / self.sample_rate, priority)
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
        if held.samples > self.max_held_seconds * self.sample_rate:
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

    def _died(self, reason: str) -> None:
        """On the loop: the engine thread died; end every open request, then say so."""
        self._death_task = asyncio.ensure_future(self._after_death(reason))

    async def _after_death(self, reason: str) -> None:
        await self.cancel_all(reason)
        if self.on_death is not None:
            self.on_death(reason)

    def _dispatch(self, report: StepReport) -> None:
        """On the loop: route a step's outputs to their streams; tell admission what it saw."""
        for out in report.outputs:
            if out.finished and out.finish_reason in ("abort", "error"):
                self.backlog.forget(out.request_id)  # left without being transcribed: no progress
            else:  # offline partials report the audio decoded so far
                self.backlog.progress(out.request_id, out.progress_seconds, out.finished)
            stream = self._streams.get(out.request_id)
            if stream is None:
                continue  # its handler already left (disconnect); the engine was told to abort
            stream.put(out)
            if out.finished and out.finish_reason == "error":
                self.series.failed(out.error_stage or "unknown")
        # the engine time live streams took (offline work did not get it), and whether they are behind
        self.admission.observe(report.live_seconds, report.streams, report.passes_shed, report.step_at,
                               passes_late=report.passes_late, spoken=report.spoken)
        self.series.queue_delay.set(self.backlog.delay())
        self.series.route.observe(time.perf_counter() - report.sent_at)
