"""proto <-> engine types for `oasr.speech.v1`: RecognitionConfig -> decoding options and audio
description, RequestOutput -> results, and errors -> gRPC status codes.

Status codes (one table for both RPCs):

    INVALID_ARGUMENT    bad config or option values, undecodable/empty audio, `uri` audio,
                        a container encoding on a live stream, no streaming_config first
    RESOURCE_EXHAUSTED  message over --max-audio-mib (grpc itself), decoded audio over
                        --max-audio-seconds (HTTP's 413), or no inflight permit free
    DEADLINE_EXCEEDED   --request-timeout-secs or the client's own deadline ran out, or a
                        stream sent nothing for --stream-idle-timeout-secs
    UNAVAILABLE         the server is draining (SIGTERM)
    NOT_FOUND           `model` names another model than --served-model-name
    UNAUTHENTICATED     API keys are configured and the call carries none that matches
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import grpc
from google.protobuf.duration_pb2 import Duration

from app.audio import AudioEncoding, AudioError, UnsupportedAudioError, parse_encoding
from app.errors import ApiError
from engine import DecodingOptions, RequestOutput
from engine.errors import EngineError, EngineOverloadedError, EngineShutdownError, InvalidRequestError
from engine.types import Task
from protos.oasr.speech.v1 import speech_pb2 as pb

Config = pb.RecognitionConfig

HTTP_TO_GRPC = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
}


class RpcError(Exception):
    """Ends an RPC with `code` and `message` (raised inside handlers, rendered by the wrapper)."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.INVALID_ARGUMENT, message)


def to_rpc_error(exc: Exception, *, draining: bool) -> RpcError:
    """Map our, the audio layer's and the engine's errors onto a status code."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, AudioError):
        status = exc.status_code
        return RpcError(HTTP_TO_GRPC.get(status, grpc.StatusCode.INVALID_ARGUMENT), str(exc))
    if isinstance(exc, EngineShutdownError):
        return RpcError(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
    if isinstance(exc, EngineOverloadedError):
        return RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    if isinstance(exc, InvalidRequestError):
        return invalid(str(exc))
    if isinstance(exc, ApiError):
        if exc.status == 503:
            # a permit refused while draining, or work cancelled by the drain -> UNAVAILABLE;
            # a permit refused for capacity -> RESOURCE_EXHAUSTED (retry later)
            code = grpc.StatusCode.UNAVAILABLE if draining else grpc.StatusCode.RESOURCE_EXHAUSTED
            return RpcError(code, exc.message)
        return RpcError(HTTP_TO_GRPC.get(exc.status, grpc.StatusCode.INTERNAL), exc.message)
    if isinstance(exc, EngineError):
        return RpcError(grpc.StatusCode.INTERNAL, str(exc))
    raise exc


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class AudioSpec:
    """How the client's bytes are encoded."""

    encoding: AudioEncoding
    sample_rate: int | None
    """None: take it from the container header."""
    channels: int


def audio_spec(config: pb.RecognitionConfig) -> AudioSpec:
    try:
        name = Config.AudioEncoding.Name(config.encoding)
    except ValueError:
        raise invalid(f"RecognitionConfig.encoding {config.encoding} is not a known AudioEncoding value") from None
    try:
        encoding = parse_encoding(name)
    except UnsupportedAudioError as exc:
        raise invalid(str(exc)) from exc
    if config.sample_rate_hertz < 0:
        raise invalid(f"sample_rate_hertz must be positive (0 reads it from the file), got {config.sample_rate_hertz}")
    if config.audio_channel_count < 0:
        raise invalid(f"audio_channel_count must be positive (0 means 1), got {config.audio_channel_count}")
    rate = config.sample_rate_hertz or None
    if encoding.headerless and rate is None:
        raise invalid(f"sample_rate_hertz is required for headerless {encoding.value} audio "
                      "(e.g. 16000); containers such as WAV or FLAC carry their own rate")
    return AudioSpec(encoding, rate, config.audio_channel_count or 1)


def language_of(code: str) -> str | None:
    """BCP-47 ('en-US', 'pt_BR') -> the ISO 639-1 primary subtag the model knows ('en')."""
    code = code.strip()
    if not code:
        return None
    primary = code.replace("_", "-").split("-")[0].lower()
    if not primary.isalpha() or not 2 <= len(primary) <= 3:
        raise invalid(f"language_code {code!r} is not a BCP-47 language code such as 'en-US'")
    return primary


def alternatives_wanted(config: pb.RecognitionConfig) -> int:
    if config.max_alternatives < 0:
        raise invalid(f"max_alternatives must be >= 0, got {config.max_alternatives}")
    return max(1, config.max_alternatives)


def decoding_options(config: pb.RecognitionConfig) -> DecodingOptions:
    """RecognitionConfig (+ DecodingExtensions) -> DecodingOptions, validated.

    Google's speech_contexts phrases become the request's keywords; the extension's
    stream_context and delay pass through to the engine, which checks them against the model.

    max_alternatives > 1 turns on beam search with at least that many beams, since the
    alternatives are the beam's n-best list."""
    ext = config.decoding
    n_alt = alternatives_wanted(config)
    beam = max(ext.beam_size, 1)
    if n_alt > 1:
        beam = max(beam, n_alt)
    task: Task = "translate" if ext.task == pb.DecodingExtensions.TRANSLATE else "transcribe"
    keywords = tuple(phrase for context in config.speech_contexts for phrase in context.phrases)
    window = ext.stream_context
    stream_context = (window.left, window.chunk, window.right) if ext.HasField("stream_context") else None
    try:
        options = DecodingOptions(
            beam_size=beam,
            temperature=float(ext.temperature),
            prompt=ext.prompt or None,
            task=task,
            top_k=ext.top_k or None,
            top_p=float(ext.top_p) or None,
            max_new_tokens=ext.max_new_tokens or None,
            seed=ext.seed if ext.HasField("seed") else None,
            language=language_of(config.language_code),
            word_timestamps=config.enable_word_time_offsets or config.enable_word_confidence,
            keywords=keywords,
            stream_context=stream_context,
            delay=ext.delay or None,  # type: ignore[arg-type]
        )
        if n_alt > 1:
            options = replace(options, n_best=n_alt)
        options.validate()
    except InvalidRequestError as exc:
        raise invalid(str(exc)) from exc
    return options


# ----------------------------------------------------------------------------- results


def duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(round(max(seconds, 0.0) * 1e9))
    return d


def billed(seconds: float) -> Duration:
    """Google bills whole seconds, rounded up."""
    return duration(math.ceil(max(seconds, 0.0)))


def alternatives(out: RequestOutput, config: pb.RecognitionConfig, *, offset: float = 0.0) -> list[pb.SpeechRecognitionAlternative]:
    """Best first: the transcript (with words when asked), then the other n-best entries."""
    want_words = config.enable_word_time_offsets or config.enable_word_confidence
    best = pb.SpeechRecognitionAlternative(
        transcript=out.text.strip(), confidence=out.nbest[0].confidence if out.nbest else 0.0
    )
    if want_words:
        for w in out.words or []:
            info = pb.WordInfo(word=w.word.strip())
            if config.enable_word_time_offsets:
                info.start_time.CopyFrom(duration(offset + w.start))
                info.end_time.CopyFrom(duration(offset + w.end))
            if config.enable_word_confidence:
                info.confidence = w.confidence
            best.words.append(info)
    alts = [best]
    for alt in out.nbest[1 : alternatives_wanted(config)]:
        alts.append(pb.SpeechRecognitionAlternative(transcript=alt.text.strip(), confidence=alt.confidence))
    return alts


def result_language(out: RequestOutput, config: pb.RecognitionConfig) -> str:
    return config.language_code or out.language or ""


def recognize_response(out: RequestOutput, config: pb.RecognitionConfig, request_id: str) -> pb.RecognizeResponse:
    """One result covering the clip (no result when nothing was said)."""
    response = pb.RecognizeResponse(request_id=request_id, total_billed_time=billed(out.duration))
    if out.text.strip():
        response.results.append(
            pb.SpeechRecognitionResult(
                alternatives=alternatives(out, config),
                result_end_time=duration(out.duration),
                language_code=result_language(out, config),
            )
        )
    return response
