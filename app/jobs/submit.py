"""A job request (app/jobs/spec.py, made by its edge) checked and turned into what the store keeps.

Everything that can be refused is refused here, before anything is stored: the model and the
options (the same admission as `recognize`; the edge already checked its config's values), the
audio source (a `file://` uri under the root), and the callback (allow-listed host). Audio problems that only decoding finds (a corrupt
file) fail the operation later with INVALID_ARGUMENT.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.jobs.callbacks import check_callback_url
from app.jobs.errors import InvalidJobError
from app.jobs.model import NewJob
from app.jobs.spec import JobRequest
from app.jobs.spool import digest_of
from app.jobs.uri import resolve_audio_uri
from app.requests import ModelNotFound, OptionsChecker, admit_options, check_model
from app.settings import Settings
from engine.errors import InvalidRequestError


@dataclass(frozen=True)
class PreparedJob:
    job: NewJob
    audio: bytes | None
    """Bytes to spool (content audio); None for a uri."""


def prepare(request: JobRequest, settings: Settings, engine: OptionsChecker | None = None, *,
            model_checked: bool = False) -> PreparedJob:
    """Validate (the options against `engine`'s model too, when given, so a job the model cannot
    serve is refused at submission as `recognize` refuses it; `model_checked`: the caller picked
    `engine` by the job's model, app/model_pool.py); raise InvalidJobError naming the problem.
    Hashes the audio (call off the loop)."""
    try:
        if not model_checked:
            check_model(settings.served_model_name, request.model)
        if engine is not None:
            admit_options(engine, request.spec.options)
    except (ModelNotFound, InvalidRequestError) as exc:
        raise InvalidJobError(str(exc)) from exc
    if request.uri is not None:
        resolve_audio_uri(request.uri, settings.audio_uri_root)
    callback_url = None
    if request.callback_url:
        callback_url = check_callback_url(request.callback_url, settings.callback_allowed_hosts)
    content = request.content
    job = NewJob(name=uuid.uuid4().hex, request=request.record, audio_digest=digest_of(content) if content else None,
                 audio_uri=request.uri, callback_url=callback_url, callback_secret=request.callback_secret)
    return PreparedJob(job, content)
