"""`JobSystem`: the job store, spool, worker and webhook sender of one server, and the actions
the surfaces (REST, gRPC) take on operations. Built by the app's lifespan."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from app.jobs.backends import DataDirLock, open_store
from app.jobs.errors import InvalidJobError, StorageFull
from app.jobs.model import Job, JobState, Page
from app.jobs.runner import EngineServices, JobRuntime
from app.jobs.spec import JobCodec, JobRequest
from app.jobs.spool import DISK_FULL_ERRNOS, Spool
from app.jobs.store import SqlJobStore
from app.jobs.submit import prepare
from app.jobs.webhooks import WebhookSender
from app.jobs.worker import JobWorker
from app.requests import ModelNotFound
from app.settings import Settings

logger = logging.getLogger(__name__)

MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 50


def data_dir(settings: Settings) -> Path:
    if settings.data_dir:
        return Path(settings.data_dir).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("oasr"))


class JobSystem:
    def __init__(self, settings: Settings, store: SqlJobStore, spool: Spool, worker: JobWorker,
                 webhooks: WebhookSender, lock: DataDirLock | None):
        self.settings = settings
        self.store = store
        self.spool = spool
        self.worker = worker
        self.webhooks = webhooks
        self._lock = lock

    @classmethod
    async def open(cls, settings: Settings, services: EngineServices, decoder: Any, metrics: Any,
                   codec: JobCodec) -> JobSystem:
        root = data_dir(settings)
        store = open_store(settings.jobs_database_url, root)
        await asyncio.to_thread(store.migrate)
        spool = Spool(Path(settings.jobs_spool_dir).expanduser() if settings.jobs_spool_dir else root / "spool")
        lock = None
        if store.dialect.name == "sqlite":
            lock = DataDirLock(root)
            if lock.acquire():
                # the only server on this store: whatever is RUNNING was ours before a crash
                taken = await asyncio.to_thread(store.expire_leases)
                if taken:
                    logger.info("jobs: %d jobs were running when the server stopped; they start again", taken)
            else:
                lock = None
                logger.warning("jobs: another server uses %s; jobs it runs are taken over only after their lease",
                               store.describe)
        runtime = JobRuntime(services=services, decoder=decoder, spool=spool, audio_uri_root=settings.audio_uri_root,
                             max_audio_seconds=settings.max_audio_seconds, priority=settings.jobs_priority,
                             codec=codec)
        webhooks = WebhookSender(store, codec, allowed_hosts=settings.callback_allowed_hosts,
                                 max_attempts=settings.webhook_max_attempts, backoff_s=settings.webhook_backoff_secs,
                                 timeout_s=settings.webhook_timeout_secs, metrics=metrics)
        worker = JobWorker(store, runtime, spool, webhooks, metrics, max_running=settings.jobs_max_running,
                           lease_s=settings.jobs_lease_secs, poll_s=settings.jobs_poll_interval_secs,
                           retention_s=settings.jobs_retention_hours * 3600.0, owner=settings.jobs_replica_id)
        worker.start()
        logger.info("jobs: store %s, spool %s, up to %d running here (replica %s)", store.describe, spool.root,
                    settings.jobs_max_running, worker.owner)
        return cls(settings, store, spool, worker, webhooks, lock)

    async def close(self) -> None:
        await self.worker.stop()
        await self.webhooks.close()
        await asyncio.to_thread(self.store.close)
        if self._lock is not None:
            self._lock.release()

    # ------------------------------------------------------------------ operations

    async def submit(self, request: JobRequest) -> Job:
        try:  # the job's model is checked (and its options against it) at submission
            service = await self.worker.runtime.services.service_for(request.model)
        except ModelNotFound as exc:
            raise InvalidJobError(str(exc)) from exc
        prepared = await asyncio.to_thread(prepare, request, self.settings, service, model_checked=True)
        new, data = prepared.job, prepared.audio

        def create() -> Job:
            if data is None:
                return self.store.create(new)
            digest = new.audio_digest
            assert digest is not None
            return self.store.create(new, audio_size=len(data), spool_limit=int(self.settings.jobs_spool_max_mib * 2**20),
                                     place_audio=lambda: self.spool.place(digest, data))

        try:
            job = await asyncio.to_thread(create)
        except Exception as exc:
            if not isinstance(exc, StorageFull) and disk_full(exc):  # the database's disk (the spool's raises it)
                raise StorageFull(f"the job database's disk is full ({exc}); nothing was stored: retry later") from exc
            raise
        logger.info("job %s queued (%s)", job.name, job.audio_uri or f"{len(data or b'')} bytes spooled")
        self.worker.wake()
        return job

    async def get(self, name: str) -> Job:
        return await asyncio.to_thread(self.store.get, name)

    async def list(self, *, page_size: int, page_token: str, filter: str) -> Page:
        size = DEFAULT_PAGE_SIZE if page_size <= 0 else min(page_size, MAX_PAGE_SIZE)
        return await asyncio.to_thread(self.store.list, page_size=size, page_token=page_token,
                                       states=parse_filter(filter))

    async def cancel(self, name: str) -> Job:
        import uuid

        job = await asyncio.to_thread(self.store.cancel, name, uuid.uuid4().hex)
        self.worker.drop(name)
        self.worker.wake()
        return job

    async def delete(self, name: str) -> None:
        await asyncio.to_thread(self.store.delete, name, self.spool.remove)
        self.worker.drop(name)


def disk_full(exc: BaseException) -> bool:
    """Whether a storage error says the disk is full: ENOSPC/EDQUOT, SQLite's 'database or disk
    is full' (SQLITE_FULL), PostgreSQL's disk_full (SQLSTATE 53100)."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return True
    return "database or disk is full" in str(exc) or getattr(exc, "sqlstate", None) == "53100"


def parse_filter(text: str) -> frozenset[JobState] | None:
    """`state=RUNNING`, `state=QUEUED OR state=RUNNING`, `done=true` / `done=false` (AIP-160 style,
    the few forms a client of this API needs). Empty: everything."""
    text = text.strip()
    if not text:
        return None
    states: set[JobState] = set()
    for term in text.replace(" or ", " OR ").split(" OR "):
        key, sep, value = term.partition("=")
        key, value = key.strip(), value.strip().strip('"').upper()
        if not sep:
            raise InvalidJobError(f"filter {text!r}: expected state=QUEUED|RUNNING|SUCCEEDED|FAILED|CANCELLED or "
                                  "done=true|false, joined with OR")
        if key == "state" and value in JobState.__members__:
            states.add(JobState(value))
        elif key == "done" and value in ("TRUE", "FALSE"):
            states |= {s for s in JobState if s.done == (value == "TRUE")}
        else:
            raise InvalidJobError(f"filter {text!r}: expected state=QUEUED|RUNNING|SUCCEEDED|FAILED|CANCELLED or "
                                  "done=true|false, joined with OR")
    return frozenset(states)
