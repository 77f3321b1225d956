"""A LongRunningRecognizeRequest checked and turned into what the store keeps.

Everything that can be refused is refused here, before anything is stored: the config (the
same checks as `recognize`), the audio source (`content` or a `file://` uri under the root),
and the callback (allow-listed host). Audio problems that only decoding finds (a corrupt
file) fail the operation later with INVALID_ARGUMENT.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.grpc.convert import RpcError, audio_spec, decoding_options
from app.jobs.callbacks import check_callback_url
from app.jobs.errors import InvalidJobError
from app.jobs.model import NewJob
from app.jobs.spool import digest_of
from app.jobs.uri import resolve_audio_uri
from app.settings import Settings
from protos.oasr.speech.v1 import speech_pb2 as pb


@dataclass(frozen=True)
class PreparedJob:
    job: NewJob
    audio: bytes | None
    """Bytes to spool (content audio); None for a uri."""


def prepare(request: pb.LongRunningRecognizeRequest, settings: Settings) -> PreparedJob:
    """Validate; raise InvalidJobError naming the problem. Hashes the audio (call off the loop)."""
    config = request.config
    if settings.served_model_name and config.model and config.model != settings.served_model_name:
        raise InvalidJobError(f"model {config.model!r} is not served here; this server serves "
                              f"{settings.served_model_name!r}")
    try:
        audio_spec(config)
        decoding_options(config)
    except RpcError as exc:
        raise InvalidJobError(exc.message) from exc
    source = request.audio.WhichOneof("audio_source")
    content: bytes | None = None
    uri: str | None = None
    if source == "uri":
        resolve_audio_uri(request.audio.uri, settings.audio_uri_root)
        uri = request.audio.uri
    elif source == "content" and request.audio.content:
        content = request.audio.content
    else:
        raise InvalidJobError("audio is empty: send the bytes in audio.content (base64 in JSON) or a file:// "
                              "audio.uri")
    callback_url = callback_secret = None
    if request.HasField("callback") and request.callback.url:
        callback_url = check_callback_url(request.callback.url, settings.callback_allowed_hosts)
        callback_secret = request.callback.secret or None
    stored = pb.LongRunningRecognizeRequest()
    stored.CopyFrom(request)
    stored.audio.Clear()  # the bytes live in the spool; the uri in its own column
    stored.ClearField("callback")  # the secret lives in its own column, never in a rendered request
    name = uuid.uuid4().hex
    job = NewJob(name=name, request=stored.SerializeToString(), audio_digest=digest_of(content) if content else None,
                 audio_uri=uri, callback_url=callback_url, callback_secret=callback_secret)
    return PreparedJob(job, content)
