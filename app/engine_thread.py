"""The engine thread: it blocks on the engine's command queue while idle, calls `engine.step()`
while there is work, records each step's metrics and hands its outputs (with the engine time
live streams took) to the event loop in one `call_soon_threadsafe`. It never touches an asyncio
object. An exception escaping a step ends it (app/engine_service.py says why): it records the
reason and has the loop told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.backlog import live_engine_seconds
from app.engine_metrics import EngineSeries
from engine import ASREngine, RequestOutput
from engine.loop import LoopObserver, drive

logger = logging.getLogger(__name__)

HEARTBEAT_MAX_AGE_S = 5.0  # readiness fails when the engine thread has not beaten for this long
STUCK_STEP_S = 120.0  # ...unless it is inside a step younger than this (one long batch is not a hang)
IDLE_WAIT_S = 1.0  # the engine thread wakes this often while idle, to beat (well inside HEARTBEAT_MAX_AGE_S)
LIVE_POST_PERIOD_S = 0.25  # steps without outputs hand their live time to the loop at most this often
STOP_JOIN_S = 45.0  # how long stop() waits for the step in progress (inside the pod's 60 s grace after the drain)


@dataclass
class StepReport:
    """What one hand-over tells the event loop."""

    outputs: list[RequestOutput]
    sent_at: float
    """perf_counter() when it was posted (the loop times its routing from it)."""
    live_seconds: float = 0.0
    """Engine time live streams took since the last report."""
    streams: int = 0
    """Live streams the runner held after the last step."""
    spoken: int = 0
    """Of them, those that have shown their cost (`RunnerStats.streams_spoken`)."""
    passes_shed: int = 0
    """Live passes shed since the last report (behind their cadence)."""
    passes_late: int = 0
    """Live passes started three quarters of a pass period late or more since the last report (close to it)."""
    step_at: float | None = None
    """monotonic() when the last step it covers began (None: an idle engine's report, as of now)."""


class EngineThread:
    def __init__(self, engine: ASREngine, series: EngineSeries, deliver: Callable[[StepReport], None],
                 died: Callable[[str], None]) -> None:
        """`deliver` and `died` run on the event loop given to `start`."""
        self.engine = engine
        self.series = series
        self._deliver_on_loop = deliver
        self._died_on_loop = died
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = threading.Event()
        self.heartbeat = 0.0
        self.steps_done = 0
        self.failures_in_a_row = 0
        """Engine steps that raised since the last one that did not (/readyz `consecutive_step_failures`;
        a step that raises ends the engine thread, so 1 means the engine died of it)."""
        self.step_started: float | None = None
        self._step_at: float | None = None  # monotonic() the last step began, not yet reported
        self._tick_started = 0.0
        self._live_s = 0.0  # live streams' engine time not yet handed over
        self._shed_new = 0  # live passes shed not yet handed over
        self._late_new = 0  # live passes started late not yet handed over
        self._streams = 0
        self._spoken = 0
        self._posted_at = 0.0  # perf_counter() of the last hand-over
        self.death: str | None = None
        """Why the thread died (None while it runs): written once by the thread."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="oasr-engine", daemon=True)
        self._thread.start()

    async def wait_started(self, timeout: float) -> bool:
        return await asyncio.to_thread(self._started.wait, timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def fresh(self) -> bool:
        """It beat lately, or is inside a step not yet long enough to be stuck."""
        now = time.monotonic()
        if now - self.heartbeat <= HEARTBEAT_MAX_AGE_S:
            return True
        return self.step_started is not None and now - self.step_started <= STUCK_STEP_S

    def stop(self) -> bool:
        """Stop and join it; False when a hung step still holds the engine after STOP_JOIN_S."""
        self._stop.set()
        self.engine.wake()  # the thread's blocking wait returns; it sees the stop and ends
        if self._thread is not None:
            # the step in progress runs to its end (its requests were cancelled: it is the last);
            # leaving it running while the interpreter exits aborts the process mid-kernel
            self._thread.join(timeout=STOP_JOIN_S)
            if self._thread.is_alive():
                logger.error("engine thread still stepping after %g s", STOP_JOIN_S)
                return False
        return True

    def _beat(self) -> None:
        self.heartbeat = time.monotonic()
        self.series.beat(heartbeat=True)

    def _run(self) -> None:
        try:
            try:
                self.engine.step()  # first step after start-up: readiness needs one
                self.steps_done += 1
                self._beat()
            finally:
                self._started.set()
            drive(self.engine, self._deliver, stop=self._stop.is_set, observer=_Observer(self),
                  idle_wait_s=IDLE_WAIT_S)
        except BaseException as exc:  # the thread ends here: nothing may leave its requests hanging
            if self._stop.is_set():  # shutting down: the engine was shut under a step
                logger.info("engine thread ended during shutdown: %r", exc)
                return
            if isinstance(exc, Exception):
                self.series.step_failures.inc()
                self.failures_in_a_row += 1
            self._die(f"engine thread died: {type(exc).__name__}: {exc}")
            if not isinstance(exc, Exception):
                raise

    def _die(self, reason: str) -> None:
        logger.critical("%s; every open request ends as UNAVAILABLE and the server exits", reason, exc_info=True)
        self.death = reason  # readiness reads it: false from now on
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
                self._loop.call_soon_threadsafe(self._died_on_loop, reason)

    def _deliver(self, outputs: list[RequestOutput]) -> bool:
        """After each step: its metrics, then its outputs to the event loop; False once the loop
        is closed (shutdown), which ends the thread."""
        stepped = time.perf_counter()
        self.failures_in_a_row = 0
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
        self._streams = stats.streams
        self._spoken = stats.streams if stats.streams_spoken is None else stats.streams_spoken
        passes = self.series.export(snapshot, stats, e.num_running, e.num_waiting)
        self._shed_new += passes.shed
        self._late_new += passes.late

    def _post(self, outputs: list[RequestOutput], idle: bool = False) -> bool:
        now = time.perf_counter()
        # live time goes over without outputs too (a saturated Whisper engine holds partials back
        # while finals decode), and an idle engine says so, so that the measured live share falls
        live_due = ((self._live_s > 0 or self._shed_new or self._late_new or idle)
                    and now - self._posted_at >= LIVE_POST_PERIOD_S)
        if (outputs or live_due) and self._loop is not None:
            report = StepReport(outputs, now, self._live_s, self._streams, self._spoken, self._shed_new,
                                self._late_new, self._step_at)
            self._live_s, self._shed_new, self._late_new, self._posted_at, self._step_at = 0.0, 0, 0, now, None
            try:
                self._loop.call_soon_threadsafe(self._deliver_on_loop, report)
            except RuntimeError:  # loop closed during shutdown
                return False
        return True


class _Observer(LoopObserver):
    """The thread's view of its loop: heartbeats while idle, the step's start (readiness tells a
    long step from a stuck one), and a failed step re-raised: its exception ends the thread."""

    def __init__(self, thread: EngineThread) -> None:
        self.thread = thread

    def idle(self) -> None:
        self.thread._beat()
        self.thread._post([], idle=True)  # no live work meanwhile: the backlog's live share decays

    def step_started(self) -> None:
        self.thread._tick_started = time.perf_counter()
        self.thread.step_started = self.thread._step_at = time.monotonic()

    def step_failed(self, exc: Exception) -> None:
        raise exc

    def stepped(self, seconds: float, failed: bool) -> None:
        self.thread.step_started = None
        self.thread.steps_done += 1
