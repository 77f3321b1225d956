"""Google-STT-shaped REST: POST /v1/speech:recognize with the audio as the raw body and the
recognition config in the query string (the fast path, and the documented default), or with
Google's own JSON body, `{"config": RecognitionConfig, "audio": {"content": base64}}`, when the
Content-Type is JSON: what Google's client libraries send."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from google.protobuf import json_format

from app.audio import AudioDecoder, parse_encoding
from app.channels import channel_tags, run_offline_channels, waveforms
from app.deps import DecoderDep, ModelsDep, SettingsDep
from app.disconnect import wait_for_disconnect
from app.engine_service import EngineService
from app.errors import ApiError, to_api_error
from app.formats import to_google_recognize, to_google_recognize_channels
from app.google.convert import AudioSpec, alternatives_wanted, audio_spec, decoding_options
from app.google.wire import new_request_id, strip_request_hints
from app.model_pool import ModelPool
from app.requests import ModelNotFound, admit_options, build_options
from app.settings import Settings
from engine import DecodingOptions
from engine.errors import EngineError, InvalidRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb

router = APIRouter(tags=["google"])


@router.post("/v1/speech:recognize")
async def recognize(
    request: Request,
    settings: SettingsDep,
    models: ModelsDep,
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
    model: Annotated[str | None, Query(description="a served model (GET /v1/models); unset: the first")] = None,
) -> JSONResponse:
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
        return await _recognize_json(request, settings, models, decoder)
    try:
        models.resolve(model)  # an unknown model is refused before the upload is read
    except ModelNotFound as exc:
        raise to_api_error(exc) from exc
    if not encoding:
        raise ApiError(400, "query parameter 'encoding' is required (e.g. encoding=LINEAR16&sample_rate=16000, "
                            "or encoding=AUTO for files)")
    try:
        enc = parse_encoding(encoding)
    except Exception as exc:
        raise to_api_error(exc) from exc
    n_alt = max(1, max_alternatives)
    try:  # BCP-47 ('en-US') becomes the ISO 639-1 code the model knows in build_options
        wanted = build_options(
            task="transcribe", language=language or language_code, prompt=prompt, temperature=temperature,
            word_timestamps=enable_word_time_offsets, beam_size=beam_size, n_best=n_alt)
    except InvalidRequestError as exc:
        raise to_api_error(exc) from exc
    spec = AudioSpec(enc, sample_rate or sample_rate_hertz, audio_channel_count)
    body = await request.body()  # before the permit: a slow upload must not hold an engine slot
    try:  # after the upload: the service stays pinned only until _recognize takes its permit
        service = await models.service_for(model)
        options = admit_options(service, wanted)
    except EngineError as exc:
        raise to_api_error(exc) from exc
    return await _recognize(request, settings, service, decoder, body, spec, options,
                            n_alt=n_alt, words=enable_word_time_offsets,
                            separate=enable_separate_recognition_per_channel, rid=request_id or new_request_id())


async def _recognize_json(request: Request, settings: Settings, models: ModelPool,
                          decoder: AudioDecoder) -> JSONResponse:
    """Google's JSON body: the same RecognitionConfig the gRPC surface reads, in proto3 JSON."""
    try:
        message = json_format.ParseDict(strip_request_hints(json.loads(await request.body())), pb.RecognizeRequest())
    except InvalidRequestError as exc:
        raise to_api_error(exc) from exc
    except (json_format.ParseError, ValueError) as exc:
        raise ApiError(400, f"invalid RecognizeRequest JSON: {exc}") from exc
    config = message.config
    if message.audio.WhichOneof("audio_source") == "uri":
        raise ApiError(400, "audio.uri is not supported: this server fetches nothing from outside; send the bytes "
                            "in audio.content (base64)")
    if not message.audio.content:
        raise ApiError(400, "audio.content is empty; send the audio bytes base64-encoded in it")
    try:
        service = await models.service_for(config.model or None)  # pinned until _recognize's permit
        spec = audio_spec(config)
        options = admit_options(service, decoding_options(config))
    except Exception as exc:
        raise to_api_error(exc) from exc
    return await _recognize(request, settings, service, decoder, message.audio.content, spec, options,
                            n_alt=alternatives_wanted(config), words=config.enable_word_time_offsets,
                            separate=config.enable_separate_recognition_per_channel,
                            rid=config.request_id or new_request_id())


async def _recognize(request: Request, settings: Settings, service: EngineService, decoder: AudioDecoder,
                     body: bytes, spec: AudioSpec, options: DecodingOptions, *, n_alt: int, words: bool,
                     separate: bool, rid: str) -> JSONResponse:
    """Decode, recognize every channel or the downmix under an inflight permit, answer in Google's
    shape (the body is read before: a slow upload holds no engine slot)."""
    async with service.admission.admit():
        try:
            audio = await decoder.decode(body, encoding=spec.encoding, sample_rate=spec.sample_rate,
                                         channels=spec.channels, max_seconds=settings.max_audio_seconds,
                                         keep_channels=separate)
            outs = await run_offline_channels(service, waveforms(audio, separate), options, api="google",
                                              timeout=settings.request_timeout_secs,
                                              disconnected=wait_for_disconnect(request))
        except Exception as exc:
            raise to_api_error(exc) from exc
    if not separate:
        return JSONResponse(to_google_recognize(outs[0], n_alt, words, rid))
    tagged = list(zip(channel_tags(len(outs), separate), outs))
    return JSONResponse(to_google_recognize_channels(tagged, n_alt, words, rid))
