"""Google Speech API shapes <-> engine types, shared by its REST and gRPC surfaces and by batch
jobs: RecognitionConfig -> decoding options and audio description, RequestOutput -> results.

Transport-neutral: a bad value raises InvalidRequestError (gRPC renders INVALID_ARGUMENT, HTTP
400, a job fails with INVALID_ARGUMENT); the status-code table lives at the gRPC edge
(app/grpc/convert.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.duration_pb2 import Duration

from app.audio import AudioEncoding, UnsupportedAudioError, parse_encoding
from app.channels import channel_tags
from app.google.wire import google_request_id, refuse_unsupported
from app.requests import OPTION_FIELDS, build_options
from engine import DecodingOptions, RequestOutput
from engine.errors import InvalidRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb

Config = pb.RecognitionConfig


def invalid(message: str) -> InvalidRequestError:
    return InvalidRequestError(message)


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


def alternatives_wanted(config: pb.RecognitionConfig) -> int:
    if config.max_alternatives < 0:
        raise invalid(f"max_alternatives must be >= 0, got {config.max_alternatives}")
    return max(1, config.max_alternatives)


PASSED_THROUGH = tuple(f for f in pb.DecodingExtensions.DESCRIPTOR.fields
                      if f.name in OPTION_FIELDS and f.name not in ("task", "stream_context"))
"""DecodingExtensions fields that are DecodingOptions fields of the same name and type; task (an
enum) and stream_context (a message) are converted."""


def passed_through(ext: pb.DecodingExtensions) -> dict[str, Any]:
    """The extension's plain fields by name: a proto3 zero (or an unset `optional`) is not set."""
    return {f.name: (getattr(ext, f.name) if ext.HasField(f.name) else None) if f.has_presence
            else getattr(ext, f.name) or None for f in PASSED_THROUGH}


def decoding_options(config: pb.RecognitionConfig) -> DecodingOptions:
    """RecognitionConfig (+ DecodingExtensions) -> DecodingOptions through the one builder
    (app/requests.build_options), validated. Proto3 zero values are "not set", so a client that
    sends every field at its default asks for nothing.

    Google's speech_contexts phrases become the request's keywords; the extension's fields pass
    through by name (`passed_through`) to the engine, which checks them against the model.
    max_alternatives > 1 turns on beam search with at least that many beams, since the
    alternatives are the beam's n-best list."""
    refuse_unsupported(config)
    ext = config.decoding
    window = ext.stream_context
    return build_options(
        task="translate" if ext.task == pb.DecodingExtensions.TRANSLATE else "transcribe",
        language=config.language_code,
        language_param="language_code",
        n_best=alternatives_wanted(config),
        word_timestamps=config.enable_word_time_offsets or config.enable_word_confidence,
        keywords=tuple(phrase for context in config.speech_contexts for phrase in context.phrases),
        stream_context=(window.left, window.chunk, window.right) if ext.HasField("stream_context") else None,
        **passed_through(ext),
    )


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
    response = pb.RecognizeResponse(request_id=google_request_id(request_id), oasr_request_id=request_id,
                                    total_billed_time=billed(out.duration))
    if out.text.strip():
        response.results.append(
            pb.SpeechRecognitionResult(
                alternatives=alternatives(out, config),
                result_end_time=duration(out.duration),
                language_code=result_language(out, config),
            )
        )
    return response


def channel_results(outs: Sequence[RequestOutput], config: pb.RecognitionConfig,
                    separate: bool) -> list[pb.SpeechRecognitionResult]:
    """gRPC `SpeechRecognitionResult`s: one per channel that said something, in channel order."""
    results = []
    for out, tag in zip(outs, channel_tags(len(outs), separate)):
        if out.text.strip():
            results.append(pb.SpeechRecognitionResult(
                alternatives=alternatives(out, config), result_end_time=duration(out.duration),
                language_code=result_language(out, config), channel_tag=tag))
    return results
