"""OpenAI-shaped audio routes: POST /v1/audio/transcriptions and /v1/audio/translations."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from app.chunking import ChunkingStrategy, chunking_from_request, transcribe_chunked
from app.deps import DecoderDep, ModelsDep, SettingsDep
from app.disconnect import wait_for_disconnect
from app.errors import ApiError, to_api_error
from app.formats import to_srt, to_verbose_json, to_vtt, usage
from app.model_pool import ModelPool
from app.offline import RequestTimeout, run_offline
from app.output_stream import OutputStream
from app.realtime.events import logprob_entries
from app.requests import admit_options, build_options
from app.settings import Settings
from engine import DecodingOptions
from engine.errors import EngineError, InvalidRequestError

logger = logging.getLogger(__name__)
router = APIRouter(tags=["openai"])

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("word", "segment")
INCLUDES = ("logprobs",)


async def _transcribe(
    request: Request,
    settings: Settings,
    models: ModelPool,
    decoder: Any,
    *,
    task: str,
    file: UploadFile,
    model: str | None,
    language: str | None,
    prompt: str | None,
    response_format: str,
    temperature: float | None,
    granularities: list[str],
    stream: bool,
    beam_size: int | None,
    chunking: ChunkingStrategy | None = None,
    include: list[str] | None = None,
) -> Response:
    try:  # the model's service, loaded if need be; pinned until the permit below is taken
        service = await models.service_for(model)
    except EngineError as exc:  # ModelNotFound (404), or a load refused or failed
        raise to_api_error(exc) from exc
    if response_format not in RESPONSE_FORMATS:
        raise ApiError(400, f"response_format must be one of {', '.join(RESPONSE_FORMATS)}", param="response_format")
    bad = [g for g in granularities if g not in GRANULARITIES]
    if bad:
        raise ApiError(400, f"timestamp_granularities[] accepts 'word' and 'segment', got {bad}",
                       param="timestamp_granularities")
    if granularities and response_format != "verbose_json":
        raise ApiError(400, "timestamp_granularities requires response_format=verbose_json",
                       param="timestamp_granularities")
    if stream and response_format not in ("json", "text"):
        raise ApiError(400, "stream=true supports response_format json or text", param="stream")
    if stream and chunking is not None:  # chunking_strategy: VAD segments (app/chunking.py)
        raise ApiError(400, "chunking_strategy is not supported with stream=true", param="chunking_strategy")
    unknown = [i for i in include or [] if i not in INCLUDES]
    if unknown:
        raise ApiError(400, f"include[] accepts {', '.join(INCLUDES)}, got {unknown}", param="include")
    logprobs = "logprobs" in (include or [])
    if logprobs and response_format != "json":
        raise ApiError(400, "include[]=logprobs needs response_format=json", param="include")
    words = "word" in granularities
    try:  # refused here, before the upload is decoded, with the engine's own words
        options = admit_options(service, build_options(
            task=task, language=language, prompt=prompt, temperature=temperature, word_timestamps=words,
            beam_size=beam_size, logprobs=logprobs))
    except InvalidRequestError as exc:
        raise to_api_error(exc) from exc
    if stream:
        return await _stream_transcription(service, decoder, file, options, settings)
    async with service.admission.admit():
        data = await file.read()
        try:
            audio = await decoder.decode(data, max_seconds=settings.max_audio_seconds)
        except Exception as exc:
            raise to_api_error(exc) from exc
        try:
            if chunking is not None:  # chunking_strategy: VAD segments (app/chunking.py)
                out = await transcribe_chunked(request, service, audio.samples, options, chunking, api="openai",
                                               timeout=settings.request_timeout_secs)
            else:
                out = await run_offline(service, audio.samples, options, api="openai",
                                        timeout=settings.request_timeout_secs,
                                        disconnected=wait_for_disconnect(request))
        except Exception as exc:
            raise to_api_error(exc) from exc
    if response_format == "text":
        return PlainTextResponse(out.text + "\n")
    if response_format == "srt":
        return PlainTextResponse(to_srt(out), media_type="application/x-subrip")
    if response_format == "vtt":
        return PlainTextResponse(to_vtt(out), media_type="text/vtt")
    if response_format == "verbose_json":
        return JSONResponse(to_verbose_json(out, task, words=words, segments=True))
    body: dict[str, Any] = {"text": out.text}
    if logprobs:
        body["logprobs"] = logprob_entries(out.token_bytes or [], out.token_logprobs or [])
    return JSONResponse({**body, "usage": usage(out)})


async def _stream_transcription(
    service: Any, decoder: Any, file: UploadFile, options: DecodingOptions, settings: Settings
) -> StreamingResponse:
    """stream=true. Admission (permit, decode, engine request) happens before the response
    starts, so refusals are real HTTP statuses; the event stream then owns the permit and the
    engine request until `done()` — run by the stream's `finally`, or by the response's
    background task when the client left before the stream ever started."""
    permit = service.admission.take()
    request_id: str | None = None
    finished = False

    def done() -> None:
        nonlocal finished
        if not finished:
            finished = True
            if request_id is not None:
                service.close(request_id)  # aborts the engine request if it is still running
            permit.release()

    try:
        data = await file.read()
        audio = await decoder.decode(data, max_seconds=settings.max_audio_seconds)
        # counted before the submit, as run_offline does
        service.metrics.count_offline_audio("openai", len(audio.samples) / service.sample_rate)
        stream = service.open_request(audio.samples, decoding=options)
    except BaseException as exc:
        done()
        if isinstance(exc, Exception):
            raise to_api_error(exc) from exc
        raise
    request_id = stream.request_id

    async def done_on_loop() -> None:  # async: a sync background task would run in a worker thread
        done()

    return StreamingResponse(_sse(service, stream, settings.request_timeout_secs, done, options.logprobs),
                             media_type="text/event-stream", background=BackgroundTask(done_on_loop))


async def _sse(service: Any, stream: OutputStream, timeout: float, done: Callable[[], None],
               logprobs: bool) -> AsyncIterator[str]:
    """Server-sent events: text deltas as windows are decoded, then the full text and [DONE].
    With logprobs, each delta carries those of the tokens it added, and the done event all."""
    metrics = service.metrics
    started = time.monotonic()
    outcome = "error"
    sent = ""
    sent_tokens = 0
    try:
        while True:
            try:
                out = await asyncio.wait_for(stream.get(), timeout=max(0.0, started + timeout - time.monotonic()))
            except TimeoutError:
                outcome = "error"
                yield _event({"type": "error", "error": {"message": RequestTimeout(timeout).message}})
                yield "data: [DONE]\n\n"
                return
            text = out.text
            if text.startswith(sent) and len(text) > len(sent):
                delta: dict[str, Any] = {"type": "transcript.text.delta", "delta": text[len(sent):]}
                if logprobs:
                    delta["logprobs"] = logprob_entries((out.token_bytes or [])[sent_tokens:],
                                                        (out.token_logprobs or [])[sent_tokens:])
                    sent_tokens = len(out.token_logprobs or [])
                yield _event(delta)
                sent = text
            if out.finished:
                if out.finish_reason == "error":
                    yield _event({"type": "error", "error": {"message": out.error or "recognition failed"}})
                else:
                    outcome = "ok"
                    final: dict[str, Any] = {"type": "transcript.text.done", "text": out.text}
                    if logprobs:
                        final["logprobs"] = logprob_entries(out.token_bytes or [], out.token_logprobs or [])
                    yield _event({**final, "usage": usage(out)})
                yield "data: [DONE]\n\n"
                return
    except BaseException:
        outcome = "cancelled"
        service.series.requests_cancelled.inc()
        raise
    finally:
        done()
        metrics.request_duration.labels(api="openai", mode="offline", outcome=outcome).observe(
            time.monotonic() - started)


def _event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


Granularities = Annotated[list[str] | None, Form(alias="timestamp_granularities[]")]
Include = Annotated[list[str] | None, Form(alias="include[]")]


@router.post("/v1/audio/transcriptions")
async def create_transcription(
    request: Request,
    settings: SettingsDep,
    models: ModelsDep,
    decoder: DecoderDep,
    file: Annotated[UploadFile, File()],
    model: Annotated[str | None, Form()] = None,
    language: Annotated[str | None, Form()] = None,
    prompt: Annotated[str | None, Form()] = None,
    response_format: Annotated[str, Form()] = "json",
    temperature: Annotated[float | None, Form()] = None,
    timestamp_granularities: Granularities = None,
    stream: Annotated[bool, Form()] = False,
    beam_size: Annotated[int | None, Form()] = None,
    include: Include = None,
) -> Response:
    return await _transcribe(
        request, settings, models, decoder, task="transcribe", file=file, model=model, language=language,
        prompt=prompt, response_format=response_format, temperature=temperature,
        granularities=timestamp_granularities or [], stream=stream, beam_size=beam_size,
        chunking=await chunking_from_request(request),  # "auto" | {"type": "server_vad", ...} | absent
        include=include,
    )


@router.post("/v1/audio/translations")
async def create_translation(
    request: Request,
    settings: SettingsDep,
    models: ModelsDep,
    decoder: DecoderDep,
    file: Annotated[UploadFile, File()],
    model: Annotated[str | None, Form()] = None,
    prompt: Annotated[str | None, Form()] = None,
    response_format: Annotated[str, Form()] = "json",
    temperature: Annotated[float | None, Form()] = None,
    beam_size: Annotated[int | None, Form()] = None,
    language: Annotated[str | None, Form(description="the spoken language (the source; the output is English); "
                                                     "unset: detected")] = None,
) -> Response:
    return await _transcribe(
        request, settings, models, decoder, task="translate", file=file, model=model, language=language,
        prompt=prompt, response_format=response_format, temperature=temperature, granularities=[],
        stream=False, beam_size=beam_size,
    )
