"""A LongRunningRecognizeRequest checked and turned into what the store keeps.

Everything that can be refused is refused here, before anything is stored: the config (the
same checks as `recognize`), the audio source (`content` or a `file://` uri under the root),
and the callback (allow-listed host). Audio problems that only decoding finds (a corrupt
file) fail the operation later with INVALID_ARGUMENT.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.google.convert import audio_spec, decoding_options
from app.jobs.callbacks import check_callback_url
from app.jobs.errors import InvalidJobError
from app.jobs.model import NewJob
from app.jobs.spool import digest_of
from app.jobs.uri import resolve_audio_uri
from app.requests import ModelNotFound, OptionsChecker, admit_options, check_model
from app.settings import Settings
from engine.errors import InvalidRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb


@dataclass(frozen=True)
class PreparedJob:
    job: NewJob
    audio: bytes | None
    """Bytes to spool (content audio); None for a uri."""


def prepare(request: pb.LongRunningRecognizeRequest, settings: Settings,
            engine: OptionsChecker | None = None) -> PreparedJob:
    """Validate (the options against `engine`'s model too, when given, so a job the model cannot
    serve is refused at submission as `recognize` refuses it); raise InvalidJobError naming the
    problem. Hashes the audio (call off the loop)."""
    config = request.config
    try:
        check_model(settings.served_model_name, config.model or None)
        audio_spec(config)
        options = decoding_options(config)
        if engine is not None:
            admit_options(engine, options)
    except (ModelNotFound, InvalidRequestError) as exc:
        raise InvalidJobError(str(exc)) from exc
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
