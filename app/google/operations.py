"""A stored job rendered as a `google.longrunning.Operation`, for gRPC and (as its proto3 JSON
mapping) for REST: `metadata` is always a LongRunningRecognizeMetadata; a finished job has
`response` (LongRunningRecognizeResponse) or `error` (google.rpc.Status), never both.

Both are typed as Google's (`type.googleapis.com/google.cloud.speech.v1.*`), so Google's client
unpacks them. In binary our extension fields (numbered from 100) ride along as fields Google's
parser skips; Google's REST Operations client parses JSON strictly (an unknown key fails it), so
the JSON carries only Google's fields unless the caller asks for ours (`extensions`)."""

from __future__ import annotations

from typing import Any

from google.longrunning import operations_pb2
from google.protobuf import json_format, timestamp_pb2
from google.rpc import status_pb2

from app.google.wire import METADATA_TYPE_URL, RESPONSE_TYPE_URL
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
EXTENSIONS_FROM = 100
"""Our fields in Google-shaped messages are numbered from here (protos/oasr/speech/v1/speech.proto)."""
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


def _error(job: Job) -> status_pb2.Status | None:
    if job.state in (JobState.FAILED, JobState.CANCELLED):
        return status_pb2.Status(code=job.error_code or 2, message=job.error_message or "")
    return None


def _response(job: Job) -> pb.LongRunningRecognizeResponse | None:
    if job.state is JobState.SUCCEEDED and job.result is not None:
        return pb.LongRunningRecognizeResponse.FromString(job.result)
    return None


def operation(job: Job) -> operations_pb2.Operation:
    """The binary Operation (gRPC); read its Any values with `pb.<Message>.FromString(any.value)`,
    since they are typed as Google's messages."""
    op = operations_pb2.Operation(name=job.name, done=job.done)
    op.metadata.type_url = METADATA_TYPE_URL
    op.metadata.value = metadata(job).SerializeToString()
    response, error = _response(job), _error(job)
    if response is not None:
        op.response.type_url = RESPONSE_TYPE_URL
        op.response.value = response.SerializeToString()
    elif error is not None:
        op.error.CopyFrom(error)
    return op


def to_json(message: Any) -> dict[str, Any]:
    """proto3 JSON (camelCase), with zero values shown (`done: false`, `progressPercent: 0`)."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def _typed_json(message: Any, type_url: str, extensions: bool) -> dict[str, Any]:
    """An Any's JSON: `@type`, then the message's fields; Google's only (numbered below 100)
    unless `extensions`."""
    google = {f.json_name for f in message.DESCRIPTOR.fields if f.number < EXTENSIONS_FROM}
    fields = to_json(message)
    return {"@type": type_url, **{k: v for k, v in fields.items() if extensions or k in google}}


def operation_json(job: Job, *, extensions: bool = False) -> dict[str, Any]:
    """The REST Operation: Google's fields only, or with ours (state, attempts, webhook,
    oasrRequestId) when `extensions`."""
    body: dict[str, Any] = {"name": job.name, "done": job.done,
                            "metadata": _typed_json(metadata(job), METADATA_TYPE_URL, extensions)}
    response, error = _response(job), _error(job)
    if response is not None:
        body["response"] = _typed_json(response, RESPONSE_TYPE_URL, extensions)
    elif error is not None:
        body["error"] = {"code": error.code, "message": error.message}
    return body
