"""Google's LongRunningRecognize <-> the job system's neutral types (app/jobs/spec.py): a
request becomes a `JobRequest`, a stored record (the request without its audio and callback
secret) becomes a `JobSpec` again, and outputs become a LongRunningRecognizeResponse."""

from __future__ import annotations

from typing import Any

from app.google.convert import audio_spec, billed, channel_results, decoding_options
from app.google.operations import operation_json
from app.google.wire import google_request_id
from app.jobs.model import Job
from app.jobs.spec import JobRequest, JobSpec
from engine import RequestOutput
from engine.errors import InvalidRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb


def _spec(config: pb.RecognitionConfig) -> JobSpec:
    audio = audio_spec(config)
    return JobSpec(options=decoding_options(config), encoding=audio.encoding, sample_rate=audio.sample_rate,
                   channels=audio.channels, separate_channels=config.enable_separate_recognition_per_channel,
                   model=config.model or None)


def job_request(request: pb.LongRunningRecognizeRequest) -> JobRequest:
    """InvalidRequestError for a config or audio source that cannot be a job."""
    source = request.audio.WhichOneof("audio_source")
    content = request.audio.content if source == "content" and request.audio.content else None
    uri = request.audio.uri if source == "uri" else None
    if content is None and uri is None:
        raise InvalidRequestError("audio is empty: send the bytes in audio.content (base64 in JSON) or a file:// "
                                  "audio.uri")
    stored = pb.LongRunningRecognizeRequest()
    stored.CopyFrom(request)
    stored.audio.Clear()  # the bytes live in the spool; the uri in its own column
    stored.ClearField("callback")  # the secret lives in its own column, never in a rendered request
    callback = request.callback if request.HasField("callback") and request.callback.url else None
    return JobRequest(record=stored.SerializeToString(), spec=_spec(request.config),
                      model=request.config.model or None, content=content, uri=uri,
                      callback_url=callback.url if callback else None,
                      callback_secret=(callback.secret or None) if callback else None)


class GoogleJobCodec:
    """The job system's codec for jobs submitted through Google's API (REST or gRPC)."""

    def spec(self, record: bytes) -> JobSpec:
        return _spec(pb.LongRunningRecognizeRequest.FromString(record).config)

    def result(self, job: Job, spec: JobSpec, outputs: list[RequestOutput], duration: float) -> bytes:
        config = pb.LongRunningRecognizeRequest.FromString(job.request).config
        rid = config.request_id or job.name
        response = pb.LongRunningRecognizeResponse(request_id=google_request_id(rid), oasr_request_id=rid,
                                                   total_billed_time=billed(duration),
                                                   results=channel_results(outputs, config, spec.separate_channels))
        return response.SerializeToString()

    def operation_json(self, job: Job) -> dict[str, Any]:
        return operation_json(job, extensions=True)  # a webhook's receiver is ours: it gets the delivery state


__all__ = ["GoogleJobCodec", "job_request"]
