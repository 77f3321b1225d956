"""A batch job as the job system sees it, in no API's types.

An edge (today the Google-shaped REST route and the gRPC servicer, both through
app/google/jobs.py) turns its own request message into a `JobRequest`: what to transcribe and
how (`JobSpec`), where the audio is, the callback, and the edge's own record of the request,
which the store keeps as opaque bytes. The same edge's `JobCodec` reads a stored record back into
a `JobSpec` when the job runs (after a restart too) and renders results and operations in its
API's shape. Jobs themselves import no protocol buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from app.audio import AudioEncoding
from app.jobs.model import Job
from engine import DecodingOptions, RequestOutput


@dataclass(frozen=True)
class JobSpec:
    """What running a job needs: how its audio is encoded and how to decode it."""

    options: DecodingOptions
    encoding: AudioEncoding
    sample_rate: int | None
    """Hz of headerless audio; None reads it from the container."""
    channels: int
    separate_channels: bool
    """Every channel recognized alone (else the downmix)."""
    model: str | None = None
    """The served model the job names (None: the first)."""


@dataclass(frozen=True)
class JobRequest:
    """A job handed over by an edge, checked by `prepare` before anything is stored."""

    record: bytes
    """The edge's own record of the request (audio bytes and callback secret removed), stored
    with the job and read back by the edge's codec."""
    spec: JobSpec
    model: str | None
    content: bytes | None
    """Audio bytes to spool, or None for `uri`."""
    uri: str | None
    """A `file://` URI under the server's audio root."""
    callback_url: str | None = None
    callback_secret: str | None = None


class JobCodec(Protocol):
    """The edge's side of stored jobs (app/google/jobs.py)."""

    def spec(self, record: bytes) -> JobSpec:
        """The spec of a stored record; InvalidRequestError when it no longer passes the checks."""
        ...

    def result(self, job: Job, spec: JobSpec, outputs: list[RequestOutput], duration: float) -> bytes:
        """The finished job's result, as stored and rendered by `operation_json`."""
        ...

    def operation_json(self, job: Job) -> dict[str, Any]:
        """The job as its API shows it (what webhooks deliver)."""
        ...


__all__ = ["JobCodec", "JobRequest", "JobSpec"]
