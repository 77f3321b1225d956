"""The records of the job system: a job's state, one attempt at running it, and its webhook.

Plain dataclasses shared by the store, the worker and the surfaces; times are Unix seconds
(float) from the replica's clock, so replicas sharing a database need synchronized clocks
(NTP), as every lease-based queue does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class JobState(str, enum.Enum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def done(self) -> bool:
        return self in DONE_STATES


DONE_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class WebhookState(str, enum.Enum):
    PENDING = "PENDING"
    """Waiting for the job to finish, or for the next attempt."""
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"
    """Every attempt failed."""


class AttemptOutcome(str, enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RELEASED = "released"
    """The replica gave the job back (shutdown); it runs again from the start."""
    EXPIRED = "expired"
    """The replica stopped renewing its lease (it died); another one took the job over."""


@dataclass(frozen=True)
class NewJob:
    """What a submission stores: everything a worker on any replica needs to run the job."""

    name: str
    request: bytes
    """The LongRunningRecognizeRequest, serialized, without audio bytes and callback secret."""
    audio_digest: str | None
    """sha256 of the spooled audio; None when the audio is a `uri`."""
    audio_uri: str | None
    callback_url: str | None = None
    callback_secret: str | None = None


@dataclass(frozen=True)
class Job:
    name: str
    state: JobState
    request: bytes
    audio_digest: str | None
    audio_uri: str | None
    progress: int
    """Percent of the audio decoded, 0..100."""
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    attempts: int
    """Times a replica claimed the job."""
    lease_owner: str | None
    lease_expires_at: float | None
    result: bytes | None
    """The LongRunningRecognizeResponse, serialized, once SUCCEEDED."""
    error_code: int | None
    """A google.rpc.Code once FAILED or CANCELLED."""
    error_message: str | None
    callback_url: str | None
    callback_secret: str | None
    webhook_state: WebhookState | None
    webhook_attempts: int
    webhook_delivery_id: str | None
    webhook_last_error: str | None
    webhook_last_attempt_at: float | None

    @property
    def done(self) -> bool:
        return self.state.done


@dataclass(frozen=True)
class Attempt:
    """One claim of a job by a replica (the store's audit trail)."""

    name: str
    attempt: int
    owner: str
    started_at: float
    ended_at: float | None
    outcome: AttemptOutcome | None
    """None while it runs (or when its replica died and nobody has taken the job over yet)."""


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    next_token: str
    """Empty on the last page."""
