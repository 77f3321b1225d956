"""Google-STT-shaped REST: POST /v1/speech:recognize with the audio as the raw body and the
recognition config in the query string."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from app.audio import parse_encoding
from app.channels import channel_tags, run_offline_channels, waveforms
from app.deps import DecoderDep, ServiceDep, SettingsDep
from app.disconnect import wait_for_disconnect
from app.errors import ApiError, to_api_error
from app.formats import to_google_recognize, to_google_recognize_channels
from app.offline import inflight_permit
from app.requests import admit_options, build_options
from engine.errors import InvalidRequestError

router = APIRouter(tags=["google"])


@router.post("/v1/speech:recognize")
async def recognize(
    request: Request,
    settings: SettingsDep,
    service: ServiceDep,
    decoder: DecoderDep,
    encoding: Annotated[str | None, Query(description="LINEAR16, LINEAR32F, MULAW, ALAW, FLAC, MP3, WAV, OGG_OPUS, WEBM_OPUS or AUTO")] = None,
    sample_rate: Annotated[int | None, Query(alias="sample_rate", description="Hz; required for headerless encodings")] = None,
    sample_rate_hertz: Annotated[int | None, Query()] = None,
    audio_channel_count: Annotated[int, Query(ge=1, le=32)] = 1,
    enable_separate_recognition_per_channel: Annotated[bool, Query()] = False,
    max_alternatives: Annotated[int, Query(ge=0, le=30)] = 1,
    language: Annotated[str | None, Query()] = None,
    language_code: Annotated[str | None, Query()] = None,
    enable_word_time_offsets: Annotated[bool, Query()] = False,
    beam_size: Annotated[int | None, Query()] = None,
    temperature: Annotated[float | None, Query()] = None,
    prompt: Annotated[str | None, Query()] = None,
    request_id: Annotated[str | None, Query()] = None,
) -> JSONResponse:
    if not encoding:
        raise ApiError(400, "query parameter 'encoding' is required (e.g. encoding=LINEAR16&sample_rate=16000, "
                            "or encoding=AUTO for files)")
    try:
        enc = parse_encoding(encoding)
    except Exception as exc:
        raise to_api_error(exc) from exc
    n_alt = max(1, max_alternatives)
    try:  # BCP-47 ('en-US') becomes the ISO 639-1 code the model knows in build_options
        options = admit_options(service.engine, build_options(
            task="transcribe", language=language or language_code, prompt=prompt, temperature=temperature,
            word_timestamps=enable_word_time_offsets, beam_size=beam_size, n_best=n_alt))
    except InvalidRequestError as exc:
        raise to_api_error(exc) from exc
    rid = request_id or uuid.uuid4().hex
    async with inflight_permit(service):
        body = await request.body()
        try:
            separate = enable_separate_recognition_per_channel
            audio = await decoder.decode(body, encoding=enc, sample_rate=sample_rate or sample_rate_hertz,
                                         channels=audio_channel_count, max_seconds=settings.max_audio_seconds,
                                         keep_channels=separate)
            outs = await run_offline_channels(service, waveforms(audio, separate), options, api="google",
                                              timeout=settings.request_timeout_secs,
                                              disconnected=wait_for_disconnect(request))
        except Exception as exc:
            raise to_api_error(exc) from exc
    if not separate:
        return JSONResponse(to_google_recognize(outs[0], n_alt, enable_word_time_offsets, rid))
    tagged = list(zip(channel_tags(len(outs), separate), outs))
    return JSONResponse(to_google_recognize_channels(tagged, n_alt, enable_word_time_offsets, rid))
