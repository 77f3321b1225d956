"""The job store on SQLite and on a real PostgreSQL server: claims, leases, guarded writes,
cancel/delete, pagination, spool reference counts and admission."""

from __future__ import annotations

import errno
import io
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.jobs.backends import open_store
from app.jobs.errors import OperationDone, OperationNotFound, SpoolFull, StorageFull
from app.jobs.model import AttemptOutcome, JobState, NewJob, WebhookState
from app.jobs.spool import Spool, digest_of
from app.jobs.store import SqlJobStore
from tests.postgres import PostgresServer, postgres_server  # noqa: F401 - fixture

LEASE_S = 30.0


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "sqlite":
        return None
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def store(store_url: str | None, tmp_path: Path) -> Iterator[SqlJobStore]:
    s = open_store(store_url, tmp_path)
    s.migrate()
    yield s
    s.close()


def new(name: str, digest: str | None = None, callback: str | None = None) -> NewJob:
    return NewJob(name=name, request=b"\x0a\x00", audio_digest=digest, audio_uri=None if digest else "file:///a.wav",
                  callback_url=callback, callback_secret="s" if callback else None)


def test_migrate_is_idempotent_and_versioned(store: SqlJobStore) -> None:
    assert store.migrate() == 1
    assert store.migrate() == 1


def test_claim_takes_oldest_first_and_each_job_once(store_url: str | None, store: SqlJobStore, tmp_path: Path) -> None:
    for i in reversed(range(5)):  # created job4 first: age, not name order, decides
        store.create(new(f"job{i}"))
        time.sleep(0.002)  # distinct created_at
    other = open_store(store_url, tmp_path)  # a second replica: its own connection
    try:
        first = store.claim("a", 2, LEASE_S)
        second = other.claim("b", 10, LEASE_S)
    finally:
        other.close()
    assert [j.name for j in first] == ["job4", "job3"]
    assert [j.name for j in second] == ["job2", "job1", "job0"]
    assert all(j.state is JobState.RUNNING and j.attempts == 1 for j in first + second)
    assert store.claim("a", 10, LEASE_S) == []


def test_expired_lease_is_taken_over_and_the_old_attempt_can_no_longer_write(store: SqlJobStore) -> None:
    store.create(new("j"))
    [job] = store.claim("dead", 1, lease_s=0.05)
    time.sleep(0.1)
    [again] = store.claim("alive", 1, LEASE_S)
    assert again.name == "j" and again.attempts == 2 and again.lease_owner == "alive"
    # the first replica wakes up: every write of its attempt is refused
    assert not store.renew("j", "dead", job.attempts, LEASE_S)
    assert not store.set_progress("j", "dead", job.attempts, 50)
    assert not store.finish("j", "dead", job.attempts, result=b"old")
    assert store.finish("j", "alive", again.attempts, result=b"new")
    done = store.get("j")
    assert done.state is JobState.SUCCEEDED and done.result == b"new" and done.progress == 100
    outcomes = [(a.owner, a.outcome) for a in store.attempts("j")]
    assert outcomes == [("dead", AttemptOutcome.EXPIRED), ("alive", AttemptOutcome.SUCCEEDED)]


def test_release_requeues_and_expire_leases_makes_running_jobs_claimable(store: SqlJobStore) -> None:
    store.create(new("r"))
    store.create(new("s"))
    [r, _s] = store.claim("a", 2, LEASE_S)
    assert store.release("r", "a", r.attempts)
    assert store.get("r").state is JobState.QUEUED
    assert store.expire_leases() == 1  # "s" was running
    taken = store.claim("b", 5, LEASE_S)
    assert sorted(j.name for j in taken) == ["r", "s"]
    assert store.attempts("r")[0].outcome is AttemptOutcome.RELEASED


def test_cancel_queued_running_and_finished(store: SqlJobStore) -> None:
    store.create(new("q"))
    cancelled = store.cancel("q")
    assert cancelled.state is JobState.CANCELLED and cancelled.error_code == 1
    store.create(new("run"))
    [run] = store.claim("a", 1, LEASE_S)
    store.cancel("run")
    assert not store.renew("run", "a", run.attempts, LEASE_S)  # its replica stops
    assert not store.finish("run", "a", run.attempts, result=b"x")
    with pytest.raises(OperationDone):
        store.cancel("run")
    with pytest.raises(OperationNotFound):
        store.cancel("nope")


def test_failed_finish_records_the_error(store: SqlJobStore) -> None:
    store.create(new("f"))
    [f] = store.claim("a", 1, LEASE_S)
    assert store.finish("f", "a", f.attempts, error_code=3, error_message="bad audio")
    job = store.get("f")
    assert (job.state, job.error_code, job.error_message) == (JobState.FAILED, 3, "bad audio")


def test_list_pages_newest_first_and_filters_by_state(store: SqlJobStore) -> None:
    for i in reversed(range(7)):  # created p6 first: age, not name order, decides
        store.create(new(f"p{i}"))
        time.sleep(0.002)
    store.cancel("p3")
    seen, token = [], ""
    while True:
        page = store.list(page_size=3, page_token=token)
        seen += [j.name for j in page.jobs]
        token = page.next_token
        if not token:
            break
    assert seen == [f"p{i}" for i in range(7)]
    cancelled = store.list(page_size=10, states=frozenset({JobState.CANCELLED}))
    assert [j.name for j in cancelled.jobs] == ["p3"]
    assert store.counts()[JobState.QUEUED] == 6


def test_spool_is_reference_counted_and_admission_is_bounded(store: SqlJobStore, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    audio, other = b"a" * 1000, b"b" * 1000
    d1, d2 = digest_of(audio), digest_of(other)
    store.create(new("x", d1), audio_size=1000, spool_limit=1500, place_audio=lambda: spool.place(d1, audio))
    store.create(new("y", d1), audio_size=1000, spool_limit=1500, place_audio=lambda: spool.place(d1, audio))
    assert store.spool_usage() == (1, 1000)  # one file for both
    with pytest.raises(SpoolFull):
        store.create(new("z", d2), audio_size=1000, spool_limit=1500, place_audio=lambda: spool.place(d2, other))
    with pytest.raises(OperationNotFound):
        store.get("z")  # nothing half-written: no job, no file, no spool row
    assert not spool.path(d2).exists() and spool.temporary_files() == []
    store.delete("x", spool.remove)
    assert spool.path(d1).exists()  # "y" still holds it
    store.delete("y", spool.remove)
    assert not spool.path(d1).exists() and store.spool_usage() == (0, 0)
    with pytest.raises(OperationNotFound):
        store.delete("y", spool.remove)


class _DiskFillsUp(io.FileIO):
    """A spool file on a disk with `room` bytes left: writes past it fail with ENOSPC after
    writing what fits, as a write(2) on a full filesystem does."""

    room = 600

    def write(self, data: object) -> int:
        view = memoryview(data)  # type: ignore[arg-type]
        if self.tell() + len(view) > self.room:
            super().write(view[: self.room - self.tell()])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(view)


def test_a_full_spool_disk_refuses_the_job_with_nothing_half_written(store: SqlJobStore, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC at the spool's write seam (tests/e2e/test_jobs_disk_full.py fills a real tmpfs):
    StorageFull (507 / RESOURCE_EXHAUSTED), no job, no spool row, no file, no temporary."""
    spool = Spool(tmp_path / "spool")
    audio = b"d" * 1000
    d = digest_of(audio)
    monkeypatch.setattr("app.jobs.spool.os.fdopen", lambda fd, mode: _DiskFillsUp(fd, "wb"))
    with pytest.raises(StorageFull, match="disk is full") as refused:
        store.create(new("full", d), audio_size=1000, spool_limit=10_000, place_audio=lambda: spool.place(d, audio))
    assert (refused.value.http_status, refused.value.grpc_code) == (507, "RESOURCE_EXHAUSTED")
    with pytest.raises(OperationNotFound):
        store.get("full")
    assert store.spool_usage() == (0, 0)
    assert spool.files() == [] and spool.temporary_files() == []
    monkeypatch.undo()  # room again: the same submission goes through
    store.create(new("full", d), audio_size=1000, spool_limit=10_000, place_audio=lambda: spool.place(d, audio))
    assert spool.read(d) == audio


def test_expire_deletes_only_finished_jobs_past_retention(store: SqlJobStore, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    data = b"c" * 10
    d = digest_of(data)
    store.create(new("old", d), audio_size=10, spool_limit=100, place_audio=lambda: spool.place(d, data))
    store.create(new("queued"))
    store.cancel("old")
    assert store.expire(time.time() - 60, spool.remove) == []
    assert store.expire(time.time() + 1, spool.remove) == ["old"]
    assert not spool.path(d).exists()
    assert store.get("queued").state is JobState.QUEUED


def test_webhook_due_after_finish_and_held_while_delivering(store: SqlJobStore) -> None:
    store.create(new("w", callback="http://127.0.0.1:9/hook"))
    assert store.get("w").webhook_state is WebhookState.PENDING
    assert store.claim_webhooks(10, LEASE_S) == []  # not finished yet
    [w] = store.claim("a", 1, LEASE_S)
    store.finish("w", "a", w.attempts, result=b"r", delivery_id="d1")
    [due] = store.claim_webhooks(10, LEASE_S)
    assert due.webhook_delivery_id == "d1" and due.callback_secret == "s"
    assert store.claim_webhooks(10, LEASE_S) == []  # held by the first claim
    store.record_webhook("w", state=WebhookState.PENDING, attempts=1, error="HTTP 500", next_at=time.time() - 1)
    [again] = store.claim_webhooks(10, LEASE_S)
    assert again.webhook_attempts == 1 and again.webhook_last_error == "HTTP 500"
    store.record_webhook("w", state=WebhookState.DELIVERED, attempts=2, error=None, next_at=None)
    assert store.claim_webhooks(10, LEASE_S) == []
    assert store.get("w").webhook_state is WebhookState.DELIVERED
