"""A stored job rendered as a `google.longrunning.Operation`, for gRPC and (as its proto3 JSON
mapping) for REST: `metadata` is always a LongRunningRecognizeMetadata; a finished job has
`response` (LongRunningRecognizeResponse) or `error` (google.rpc.Status), never both."""

from __future__ import annotations

from typing import Any

from google.longrunning import operations_pb2
from google.protobuf import json_format, timestamp_pb2
from google.rpc import status_pb2

from app.jobs.model import Job, JobState, WebhookState
from protos.oasr.speech.v1 import speech_pb2 as pb

_STATES = {
    JobState.QUEUED: pb.LongRunningRecognizeMetadata.QUEUED,
    JobState.RUNNING: pb.LongRunningRecognizeMetadata.RUNNING,
    JobState.SUCCEEDED: pb.LongRunningRecognizeMetadata.SUCCEEDED,
    JobState.FAILED: pb.LongRunningRecognizeMetadata.FAILED,
    JobState.CANCELLED: pb.LongRunningRecognizeMetadata.CANCELLED,
}
_WEBHOOK_STATES = {
    WebhookState.PENDING: pb.WebhookDelivery.PENDING,
    WebhookState.DELIVERED: pb.WebhookDelivery.DELIVERED,
    WebhookState.FAILED: pb.WebhookDelivery.FAILED,
}
STATE_NAMES = {name for name in pb.LongRunningRecognizeMetadata.State.keys() if name != "STATE_UNSPECIFIED"}  # noqa: SIM118


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMicroseconds(round(seconds * 1e6))
    return ts


def metadata(job: Job) -> pb.LongRunningRecognizeMetadata:
    meta = pb.LongRunningRecognizeMetadata(
        progress_percent=job.progress,
        start_time=_timestamp(job.created_at),
        last_update_time=_timestamp(job.updated_at),
        uri=job.audio_uri or "",
        state=_STATES[job.state],
        attempts=job.attempts,
    )
    if job.callback_url:
        hook = pb.WebhookDelivery(url=job.callback_url, attempts=job.webhook_attempts,
                                  delivery_id=job.webhook_delivery_id or "", last_error=job.webhook_last_error or "")
        if job.webhook_state is not None:
            hook.state = _WEBHOOK_STATES[job.webhook_state]
        if job.webhook_last_attempt_at is not None:
            hook.last_attempt_time.CopyFrom(_timestamp(job.webhook_last_attempt_at))
        meta.webhook.CopyFrom(hook)
    return meta


def operation(job: Job) -> operations_pb2.Operation:
    op = operations_pb2.Operation(name=job.name, done=job.done)
    op.metadata.Pack(metadata(job))
    if job.state is JobState.SUCCEEDED and job.result is not None:
        op.response.Pack(pb.LongRunningRecognizeResponse.FromString(job.result))
    elif job.state in (JobState.FAILED, JobState.CANCELLED):
        op.error.CopyFrom(status_pb2.Status(code=job.error_code or 2, message=job.error_message or ""))
    return op


def to_json(message: Any) -> dict[str, Any]:
    """proto3 JSON (camelCase), with zero values shown (`done: false`, `progressPercent: 0`)."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def operation_json(job: Job) -> dict[str, Any]:
    return to_json(operation(job))
