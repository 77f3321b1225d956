"""One replica's job worker: claims jobs up to `jobs_max_running`, runs them, keeps their
leases, and stops cleanly.

    claim loop     free slots -> store.claim -> one task per job (woken at once by a local
                   submission, otherwise every `jobs_poll_interval_secs`)
    renew loop     every third of the lease: renew each running job's lease; a job that is no
                   longer ours (cancelled, deleted, taken over) has its task cancelled, which
                   aborts its engine requests
    housekeeping   job and queue-age gauges, retention, due webhooks

A job task ends in exactly one of: finish (SUCCEEDED / FAILED), release (shutdown: back to
the queue, it restarts from the beginning), or drop (it is not ours any more). Every store
write is guarded by (owner, attempt), so a job completes once even if two replicas ran it.

The store may be away for a while (a PostgreSQL restart or failover): claims and renewals
are retried by their loops, progress is advisory (a failed progress write never fails the job),
and a job's end is written again and again (a guarded write is safe to repeat) until it lands
or a lease has passed, after which another replica may have taken the job over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from app.jobs.model import Job, JobState
from app.jobs.runner import EngineGone, JobFailed, JobRuntime, recognize_job
from app.jobs.spool import Spool
from app.jobs.store import SqlJobStore
from app.jobs.webhooks import WebhookSender

logger = logging.getLogger(__name__)

HOUSEKEEPING_S = 5.0
END_WRITE_BACKOFF_S = (0.2, 5.0)
"""First and longest wait (s) between attempts to record a job's end while the store is away."""
MIN_END_WRITE_RETRY_S = 10.0
"""Keep retrying a job's end at least this long (s), even with a shorter lease."""
"""How often gauges are refreshed and due webhooks delivered when nothing wakes the loop."""
RETENTION_SWEEP_S = 60.0


class _Running:
    def __init__(self, job: Job, task: asyncio.Task[None]):
        self.job = job
        self.task = task
        self.release_on_cancel = False
        """True when the worker stops: the job goes back to the queue instead of being dropped."""


class JobWorker:
    def __init__(self, store: SqlJobStore, runtime: JobRuntime, spool: Spool, webhooks: WebhookSender, metrics: Any,
                 *, max_running: int, lease_s: float, poll_s: float, retention_s: float,
                 owner: str | None = None):
        self.store = store
        self.runtime = runtime
        self.spool = spool
        self.webhooks = webhooks
        self.metrics = metrics
        self.max_running = max_running
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.retention_s = retention_s
        self.owner = owner or f"{uuid.uuid4().hex[:12]}"
        self._running: dict[str, _Running] = {}
        self._wake = asyncio.Event()
        self._webhook_wake = asyncio.Event()
        self._claiming = True
        self._loops: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._loops = [asyncio.ensure_future(self._claim_loop()), asyncio.ensure_future(self._renew_loop()),
                       asyncio.ensure_future(self._housekeeping_loop())]

    def wake(self) -> None:
        self._wake.set()

    def stop_claiming(self) -> None:
        self._claiming = False

    async def stop(self) -> None:
        """Stop claiming; running jobs are cancelled and go back to the queue."""
        self._claiming = False
        for loop in self._loops:
            loop.cancel()
        for running in list(self._running.values()):
            running.release_on_cancel = True
            running.task.cancel()
        await asyncio.gather(*self._loops, *(r.task for r in list(self._running.values())), return_exceptions=True)

    def drop(self, name: str) -> None:
        """The job was cancelled or deleted here: stop running it now rather than at the next renewal."""
        running = self._running.get(name)
        if running is not None:
            running.task.cancel()

    @property
    def running(self) -> list[str]:
        return list(self._running)

    # ------------------------------------------------------------------ loops

    async def _claim_loop(self) -> None:
        while True:
            free = self.max_running - len(self._running)
            services = self.runtime.services
            service = services.default_service
            # batch jobs yield to interactive work: none starts while new requests are being shed
            shedding = service is not None and service.admission.offline_retry() is not None
            if free > 0 and self._claiming and not services.draining and not shedding:
                try:
                    jobs = await asyncio.to_thread(self.store.claim, self.owner, free, self.lease_s)
                except Exception:
                    logger.exception("claiming jobs from %s failed", self.store.describe)
                    jobs = []
                for job in jobs:
                    logger.info("job %s: attempt %d started on %s", job.name, job.attempts, self.owner)
                    task = asyncio.ensure_future(self._run(job))
                    self._running[job.name] = _Running(job, task)
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            for name, running in list(self._running.items()):
                try:
                    ours = await asyncio.to_thread(self.store.renew, name, self.owner, running.job.attempts,
                                                   self.lease_s)
                except Exception:
                    logger.exception("renewing the lease of job %s failed", name)
                    continue
                if not ours:
                    logger.info("job %s is no longer ours (cancelled, deleted or taken over); stopping it", name)
                    running.task.cancel()

    async def _housekeeping_loop(self) -> None:
        last_sweep = 0.0
        while True:
            try:
                await self._refresh_gauges()
                if time.monotonic() - last_sweep >= RETENTION_SWEEP_S:
                    last_sweep = time.monotonic()
                    expired = await asyncio.to_thread(self.store.expire, time.time() - self.retention_s,
                                                      self.spool.remove)
                    if expired:
                        logger.info("retention: deleted %d finished jobs", len(expired))
                while await self.webhooks.deliver_due():
                    pass
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("job housekeeping failed")
            self._webhook_wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._webhook_wake.wait(), min(self.poll_s, HOUSEKEEPING_S))

    async def _refresh_gauges(self) -> None:
        counts = await asyncio.to_thread(self.store.counts)
        for state, n in counts.items():
            self.metrics.jobs.labels(state=state.value).set(n)
        oldest = await asyncio.to_thread(self.store.oldest_queued)
        self.metrics.jobs_queue_age.set(max(0.0, time.time() - oldest) if oldest is not None else 0.0)

    # ------------------------------------------------------------------ one job

    async def _run(self, job: Job) -> None:
        started = time.monotonic()
        outcome = "lost"
        write: Callable[[], bool] | None = None
        try:
            result = await recognize_job(job, self.runtime, lambda p: self._progress(job, p))
            write = lambda: self.store.finish(job.name, self.owner, job.attempts, result=result,  # noqa: E731
                                              delivery_id=uuid.uuid4().hex)
            outcome = "succeeded"
        except JobFailed as exc:
            code, message = exc.code_value, exc.message
            write = lambda: self.store.finish(job.name, self.owner, job.attempts, error_code=code,  # noqa: E731
                                              error_message=message, delivery_id=uuid.uuid4().hex)
            outcome = "failed"
            logger.info("job %s failed: %s", job.name, message)
        except EngineGone:
            write = lambda: self.store.release(job.name, self.owner, job.attempts)  # noqa: E731
            outcome = "released"
        except asyncio.CancelledError:
            running = self._running.get(job.name)
            if running is not None and running.release_on_cancel:
                write = lambda: self.store.release(job.name, self.owner, job.attempts)  # noqa: E731
                outcome = "released"
            else:
                outcome = "dropped"
        except Exception as exc:
            logger.exception("job %s failed unexpectedly", job.name)
            message = f"internal error: {type(exc).__name__}: {exc}"
            write = lambda: self.store.finish(job.name, self.owner, job.attempts, error_code=13,  # noqa: E731
                                              error_message=message, delivery_id=uuid.uuid4().hex)
            outcome = "failed"
        finally:
            # shielded: a release during shutdown must reach the store even though we are cancelled
            if write is not None and not await asyncio.shield(self._write_end(job, write)):
                outcome = "lost"
            self._running.pop(job.name, None)
            self.metrics.job_duration.labels(outcome=outcome).observe(time.monotonic() - started)
            logger.info("job %s: attempt %d %s after %.1f s", job.name, job.attempts, outcome,
                        time.monotonic() - started)
            self._wake.set()
            if outcome in ("succeeded", "failed"):
                self._webhook_wake.set()

    async def _write_end(self, job: Job, write: Callable[[], bool]) -> bool:
        """Record a job's end (a guarded write: False when the job is no longer ours), retrying
        while the store is unreachable (module doc)."""
        give_up = time.monotonic() + max(self.lease_s, MIN_END_WRITE_RETRY_S)
        delay, longest = END_WRITE_BACKOFF_S
        while True:
            try:
                return await asyncio.to_thread(write)
            except Exception as exc:
                if time.monotonic() + delay > give_up:
                    logger.exception("recording the end of job %s failed; its lease will expire and the job run "
                                     "again", job.name)
                    return False
                logger.warning("recording the end of job %s failed (%s); retrying in %.1f s", job.name, exc, delay)
            await asyncio.sleep(delay)
            delay = min(2 * delay, longest)

    async def _progress(self, job: Job, percent: int) -> None:
        try:
            ours = await asyncio.to_thread(self.store.set_progress, job.name, self.owner, job.attempts, percent)
        except Exception as exc:  # advisory: the store being away must not fail the job
            logger.warning("job %s: progress %d%% not recorded (%s)", job.name, percent, exc)
            return
        if not ours:
            raise asyncio.CancelledError  # not ours any more: stop decoding


__all__ = ["JobState", "JobWorker"]
