"""The job store: one SQL implementation over SQLite (one server) or PostgreSQL (many replicas).

Every method is one short transaction, safe to call from any replica at any time:

- `claim` takes queued jobs, and running jobs whose lease expired (their replica died), with
  `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL (SQLite serializes writers with
  `BEGIN IMMEDIATE` instead), and stamps each with the claimer and a new attempt number.
- Every later write by the runner (`renew`, `set_progress`, `finish`, `release`) is guarded
  by (owner, attempt): a replica that lost its lease can no longer touch the job, so a job
  completes once even when two replicas decoded it.
- `job_attempts` records each claim and how it ended: the audit trail of who ran what.
- Spooled audio is reference-counted in `spool` (content-addressed files are shared by jobs
  with the same audio). The spool file is placed and removed inside the transaction that
  changes its count, under that row's lock, so a deletion can never remove the file of a
  submission that is committing at the same moment.

Methods are synchronous (sqlite3 and psycopg are); async callers use `asyncio.to_thread`.
The connection, its lock and the dialects' SQL differences are app/jobs/sql.py's.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from app.jobs.errors import InvalidJobError, OperationDone, OperationNotFound, SpoolFull
from app.jobs.model import (
    DONE_STATES,
    Attempt,
    AttemptOutcome,
    Job,
    JobState,
    NewJob,
    Page,
    WebhookState,
)
from app.jobs.schema import CREATE_VERSIONS, MIGRATIONS, SCHEMA_VERSION, Dialect, SchemaTooNew
from app.jobs.sql import Cursor, Database

logger = logging.getLogger(__name__)

JOB_COLUMNS = (
    "name, state, request, audio_digest, audio_uri, progress, created_at, updated_at, started_at, finished_at, "
    "attempts, lease_owner, lease_expires_at, result, error_code, error_message, callback_url, callback_secret, "
    "webhook_state, webhook_attempts, webhook_delivery_id, webhook_last_error, webhook_last_attempt_at"
)
CANCELLED_CODE = 1  # google.rpc.Code.CANCELLED
_DONE = tuple(s.value for s in DONE_STATES)


def _job(row: tuple[Any, ...]) -> Job:
    r = list(row)
    r[1] = JobState(r[1])
    r[2] = bytes(r[2])
    if r[13] is not None:
        r[13] = bytes(r[13])
    if r[18] is not None:
        r[18] = WebhookState(r[18])
    return Job(*r)


class SqlJobStore:
    """See the module docstring. Built by `app.jobs.backends.open_store(url)`."""

    def __init__(self, connect: Callable[[], Any], dialect: Dialect, *, describe: str):
        self._db = Database(connect, dialect)
        self.dialect = dialect
        self.describe = describe
        """Where the store is, for logs (no password)."""

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------ schema

    def migrate(self) -> int:
        """Apply the migrations this database lacks; return the schema version."""
        with self._db.transaction() as cur:
            if self.dialect.name == "postgresql":
                cur.execute("SELECT pg_advisory_xact_lock(?)", (0x0A5A_0001,))  # one migrator at a time
            cur.execute(self.dialect.render(CREATE_VERSIONS))
            cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
            current = int(cur.fetchone()[0])
            if current > SCHEMA_VERSION:
                raise SchemaTooNew(f"the jobs database ({self.describe}) has schema version {current}, newer than "
                                   f"this server's {SCHEMA_VERSION}; upgrade the server")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version - 1]:
                    cur.execute(self.dialect.render(statement))
                cur.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", (version, time.time()))
                logger.info("jobs store %s: applied schema migration %d", self.describe, version)
        return SCHEMA_VERSION

    # ------------------------------------------------------------------ submission and reads

    def create(self, job: NewJob, *, audio_size: int = 0, spool_limit: int = 0,
               place_audio: Callable[[], None] | None = None) -> Job:
        """Insert a queued job. With spooled audio, admit it against `spool_limit` bytes (all
        spooled audio, every replica) and call `place_audio` (which puts the file in place)
        inside the transaction; SpoolFull refuses the job with nothing written."""
        now = time.time()
        with self._db.transaction() as cur:
            webhook = WebhookState.PENDING.value if job.callback_url else None
            try:
                cur.execute(
                    "INSERT INTO jobs (name, state, request, audio_digest, audio_uri, created_at, updated_at, "
                    "callback_url, callback_secret, webhook_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (job.name, JobState.QUEUED.value, job.request, job.audio_digest, job.audio_uri, now, now,
                     job.callback_url, job.callback_secret, webhook),
                )
            except Exception as exc:
                if "unique" in str(exc).lower() or "duplicate" in str(exc).lower():
                    raise InvalidJobError(f"an operation named {job.name!r} already exists") from exc
                raise
            if job.audio_digest is not None:
                if self.dialect.name == "postgresql":
                    cur.execute("SELECT pg_advisory_xact_lock(?)", (0x0A5A_0002,))  # spool admission
                cur.execute("SELECT refs FROM spool WHERE digest = ?" + self._db.for_update, (job.audio_digest,))
                if cur.fetchone() is not None:
                    cur.execute("UPDATE spool SET refs = refs + 1 WHERE digest = ?", (job.audio_digest,))
                else:
                    cur.execute("SELECT COALESCE(SUM(size), 0) FROM spool")
                    used = int(cur.fetchone()[0])
                    if used + audio_size > spool_limit:
                        raise SpoolFull(
                            f"the audio spool is full: {used / 2**20:.1f} MiB of {spool_limit / 2**20:.1f} MiB used and "
                            f"this audio is {audio_size / 2**20:.1f} MiB (--jobs-spool-max-mib); retry after jobs finish "
                            "and are deleted, or send an audio.uri")
                    cur.execute("INSERT INTO spool (digest, size, refs) VALUES (?, ?, 1)", (job.audio_digest, audio_size))
                if place_audio is not None:
                    place_audio()  # last: a failure before it leaves no file, and this is atomic
            cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?", (job.name,))
            return _job(cur.fetchone())

    def get(self, name: str) -> Job:
        with self._db.transaction() as cur:
            cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?", (name,))
            row = cur.fetchone()
        if row is None:
            raise OperationNotFound(name)
        return _job(row)

    def list(self, *, page_size: int, page_token: str = "", states: frozenset[JobState] | None = None) -> Page:
        """Newest first. `page_token` is the `next_token` of the previous page."""
        where, params = [], []  # type: ignore[var-annotated]
        if states:
            where.append("state IN (" + ", ".join("?" for _ in states) + ")")
            params.extend(sorted(s.value for s in states))
        if page_token:
            created, name = _decode_token(page_token)
            where.append("(created_at < ? OR (created_at = ? AND name < ?))")
            params.extend([created, created, name])
        sql = f"SELECT {JOB_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, name DESC LIMIT ?"
        with self._db.transaction() as cur:
            cur.execute(sql, (*params, page_size + 1))
            rows = cur.fetchall()
        jobs = [_job(r) for r in rows[:page_size]]
        token = _encode_token(jobs[-1].created_at, jobs[-1].name) if len(rows) > page_size else ""
        return Page(jobs, token)

    def attempts(self, name: str) -> list[Attempt]:
        with self._db.transaction() as cur:
            cur.execute("SELECT name, attempt, owner, started_at, ended_at, outcome FROM job_attempts "
                        "WHERE name = ? ORDER BY attempt", (name,))
            rows = cur.fetchall()
        return [Attempt(r[0], r[1], r[2], r[3], r[4], AttemptOutcome(r[5]) if r[5] else None) for r in rows]

    def counts(self) -> dict[JobState, int]:
        with self._db.transaction() as cur:
            cur.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")
            found = {JobState(s): int(n) for s, n in cur.fetchall()}
        return {s: found.get(s, 0) for s in JobState}

    def oldest_queued(self) -> float | None:
        """created_at of the oldest queued job (None when the queue is empty)."""
        with self._db.transaction() as cur:
            cur.execute("SELECT MIN(created_at) FROM jobs WHERE state = ?", (JobState.QUEUED.value,))
            value = cur.fetchone()[0]
        return float(value) if value is not None else None

    # ------------------------------------------------------------------ running

    def claim(self, owner: str, limit: int, lease_s: float) -> list[Job]:
        """Take up to `limit` runnable jobs, oldest first: queued ones, and running ones whose
        lease expired (their previous attempt is recorded as expired)."""
        if limit <= 0:
            return []
        now = time.time()
        with self._db.transaction() as cur:
            cur.execute(
                "SELECT name, state, attempts FROM jobs WHERE state = ? OR (state = ? AND lease_expires_at < ?) "
                "ORDER BY created_at, name LIMIT ?" + self._db.skip_locked,
                (JobState.QUEUED.value, JobState.RUNNING.value, now, limit),
            )
            picked = cur.fetchall()
            claimed = []
            for name, state, attempts in picked:
                if state == JobState.RUNNING.value:
                    self._end_attempt(cur, name, attempts, AttemptOutcome.EXPIRED, now)
                cur.execute(
                    "UPDATE jobs SET state = ?, attempts = attempts + 1, lease_owner = ?, lease_expires_at = ?, "
                    "progress = 0, started_at = COALESCE(started_at, ?), updated_at = ? WHERE name = ?",
                    (JobState.RUNNING.value, owner, now + lease_s, now, now, name),
                )
                cur.execute("INSERT INTO job_attempts (name, attempt, owner, started_at) VALUES (?, ?, ?, ?)",
                            (name, attempts + 1, owner, now))
                cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?", (name,))
                claimed.append(_job(cur.fetchone()))
        return claimed

    def renew(self, name: str, owner: str, attempt: int, lease_s: float) -> bool:
        """Extend a lease; False when the job is no longer this attempt's (cancelled, deleted, taken over)."""
        now = time.time()
        with self._db.transaction() as cur:
            cur.execute(
                "UPDATE jobs SET lease_expires_at = ? WHERE name = ? AND state = ? AND lease_owner = ? AND attempts = ?",
                (now + lease_s, name, JobState.RUNNING.value, owner, attempt),
            )
            return bool(cur.rowcount == 1)

    def set_progress(self, name: str, owner: str, attempt: int, percent: int) -> bool:
        with self._db.transaction() as cur:
            cur.execute(
                "UPDATE jobs SET progress = ?, updated_at = ? WHERE name = ? AND state = ? AND lease_owner = ? "
                "AND attempts = ?",
                (percent, time.time(), name, JobState.RUNNING.value, owner, attempt),
            )
            return bool(cur.rowcount == 1)

    def finish(self, name: str, owner: str, attempt: int, *, result: bytes | None = None,
               error_code: int | None = None, error_message: str | None = None, delivery_id: str | None = None) -> bool:
        """SUCCEEDED with `result`, else FAILED with the error. False (and nothing written) when
        this attempt no longer owns the job."""
        now = time.time()
        state = JobState.SUCCEEDED if result is not None else JobState.FAILED
        with self._db.transaction() as cur:
            cur.execute(
                "UPDATE jobs SET state = ?, result = ?, error_code = ?, error_message = ?, progress = ?, "
                "finished_at = ?, updated_at = ?, lease_owner = NULL, lease_expires_at = NULL, "
                "webhook_next_at = CASE WHEN callback_url IS NULL THEN NULL ELSE ? END, webhook_delivery_id = ? "
                "WHERE name = ? AND state = ? AND lease_owner = ? AND attempts = ?",
                (state.value, result, error_code, error_message, 100 if result is not None else 0, now, now, now,
                 delivery_id, name, JobState.RUNNING.value, owner, attempt),
            )
            if cur.rowcount != 1:
                return False
            outcome = AttemptOutcome.SUCCEEDED if result is not None else AttemptOutcome.FAILED
            self._end_attempt(cur, name, attempt, outcome, now)
            return True

    def release(self, name: str, owner: str, attempt: int) -> bool:
        """Give a running job back to the queue (shutdown): it starts again from the beginning."""
        now = time.time()
        with self._db.transaction() as cur:
            cur.execute(
                "UPDATE jobs SET state = ?, lease_owner = NULL, lease_expires_at = NULL, progress = 0, updated_at = ? "
                "WHERE name = ? AND state = ? AND lease_owner = ? AND attempts = ?",
                (JobState.QUEUED.value, now, name, JobState.RUNNING.value, owner, attempt),
            )
            if cur.rowcount != 1:
                return False
            self._end_attempt(cur, name, attempt, AttemptOutcome.RELEASED, now)
            return True

    def expire_leases(self) -> int:
        """Make every running job claimable now: for a server that knows it is the store's only
        user (an exclusive SQLite data dir) and so that no other process is running them."""
        with self._db.transaction() as cur:
            cur.execute("UPDATE jobs SET lease_expires_at = 0 WHERE state = ?", (JobState.RUNNING.value,))
            return int(cur.rowcount)

    def _end_attempt(self, cur: Cursor, name: str, attempt: int, outcome: AttemptOutcome, now: float) -> None:
        cur.execute("UPDATE job_attempts SET ended_at = ?, outcome = ? WHERE name = ? AND attempt = ? "
                    "AND outcome IS NULL", (now, outcome.value, name, attempt))

    # ------------------------------------------------------------------ client actions

    def cancel(self, name: str, delivery_id: str | None = None) -> Job:
        """Queued or running -> CANCELLED (a running one's replica notices at its next lease
        renewal and stops). Finished -> OperationDone."""
        now = time.time()
        with self._db.transaction() as cur:
            cur.execute("SELECT state, attempts FROM jobs WHERE name = ?" + self._db.for_update, (name,))
            row = cur.fetchone()
            if row is None:
                raise OperationNotFound(name)
            state, attempts = JobState(row[0]), row[1]
            if state.done:
                raise OperationDone(f"operation {name!r} already finished ({state.value}); only a queued or "
                                    "running operation can be cancelled")
            cur.execute(
                "UPDATE jobs SET state = ?, error_code = ?, error_message = ?, finished_at = ?, updated_at = ?, "
                "lease_owner = NULL, lease_expires_at = NULL, "
                "webhook_next_at = CASE WHEN callback_url IS NULL THEN NULL ELSE ? END, webhook_delivery_id = ? "
                "WHERE name = ?",
                (JobState.CANCELLED.value, CANCELLED_CODE, "the operation was cancelled", now, now, now, delivery_id,
                 name),
            )
            if state is JobState.RUNNING:
                self._end_attempt(cur, name, attempts, AttemptOutcome.CANCELLED, now)
            cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?", (name,))
            return _job(cur.fetchone())

    def delete(self, name: str, remove_audio: Callable[[str], None]) -> None:
        """Forget a job and its attempts; `remove_audio(digest)` runs (inside the transaction)
        when this was the last job holding that spooled audio. A running job's replica stops at
        its next lease renewal."""
        with self._db.transaction() as cur:
            cur.execute("SELECT audio_digest FROM jobs WHERE name = ?" + self._db.for_update, (name,))
            row = cur.fetchone()
            if row is None:
                raise OperationNotFound(name)
            self._delete(cur, name, row[0], remove_audio)

    def expire(self, finished_before: float, remove_audio: Callable[[str], None], limit: int = 100) -> list[str]:
        """Delete up to `limit` jobs that finished before `finished_before`; return their names."""
        with self._db.transaction() as cur:
            cur.execute(
                "SELECT name, audio_digest FROM jobs WHERE state IN (?, ?, ?) AND finished_at < ? "
                "ORDER BY finished_at LIMIT ?" + self._db.skip_locked,
                (*_DONE, finished_before, limit),
            )
            rows = cur.fetchall()
            for name, digest in rows:
                self._delete(cur, name, digest, remove_audio)
        return [r[0] for r in rows]

    def _delete(self, cur: Cursor, name: str, digest: str | None, remove_audio: Callable[[str], None]) -> None:
        cur.execute("DELETE FROM jobs WHERE name = ?", (name,))
        cur.execute("DELETE FROM job_attempts WHERE name = ?", (name,))
        if digest is None:
            return
        cur.execute("SELECT refs FROM spool WHERE digest = ?" + self._db.for_update, (digest,))
        row = cur.fetchone()
        if row is None:
            return
        if row[0] <= 1:
            cur.execute("DELETE FROM spool WHERE digest = ?", (digest,))
            remove_audio(digest)
        else:
            cur.execute("UPDATE spool SET refs = refs - 1 WHERE digest = ?", (digest,))

    def spool_usage(self) -> tuple[int, int]:
        """(files, bytes) of spooled audio."""
        with self._db.transaction() as cur:
            cur.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM spool")
            files, size = cur.fetchone()
        return int(files), int(size)

    # ------------------------------------------------------------------ webhooks

    def claim_webhooks(self, limit: int, lease_s: float) -> list[Job]:
        """Finished jobs whose webhook is due; each is held for `lease_s` (its next attempt time
        moves past the attempt) so other replicas skip it while one delivers."""
        now = time.time()
        with self._db.transaction() as cur:
            cur.execute(
                "SELECT name FROM jobs WHERE webhook_state = ? AND webhook_next_at <= ? ORDER BY webhook_next_at "
                "LIMIT ?" + self._db.skip_locked,
                (WebhookState.PENDING.value, now, limit),
            )
            names = [r[0] for r in cur.fetchall()]
            jobs = []
            for name in names:
                cur.execute("UPDATE jobs SET webhook_next_at = ? WHERE name = ?", (now + lease_s, name))
                cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ?", (name,))
                jobs.append(_job(cur.fetchone()))
        return jobs

    def record_webhook(self, name: str, *, state: WebhookState, attempts: int, error: str | None,
                       next_at: float | None) -> None:
        with self._db.transaction() as cur:
            cur.execute(
                "UPDATE jobs SET webhook_state = ?, webhook_attempts = ?, webhook_last_error = ?, "
                "webhook_last_attempt_at = ?, webhook_next_at = ? WHERE name = ?",
                (state.value, attempts, error, time.time(), next_at, name),
            )


def _encode_token(created_at: float, name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created_at, name]).encode()).decode().rstrip("=")


def _decode_token(token: str) -> tuple[float, str]:
    try:
        created, name = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return float(created), str(name)
    except (ValueError, TypeError) as exc:
        raise InvalidJobError("pageToken is not one this server handed out") from exc
