"""Recognize over gRPC (`oasr.speech.v1.Speech`): request building and response reading shared by
the sync and async clients."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from oasr.types import APIError, Recognition, ServerUnreachable

DEFAULT_GRPC_PORT = 50051
"""The server's gRPC port unless OASR_GRPC_PORT moved it."""
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest message the channel sends or takes (the server's own limit, --max-audio-mib, applies first)."""
CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]


def grpc_target(base_url: str, port: int = DEFAULT_GRPC_PORT) -> str:
    """host:port of the gRPC listener beside an HTTP base URL."""
    host = urlsplit(base_url).hostname or "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def metadata(api_key: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_key}"),) if api_key else ()


def recognize_request(audio: bytes, *, encoding: str = "AUTO", sample_rate: int = 0, language: str | None = None,
                      word_time_offsets: bool = False, max_alternatives: int = 1,
                      model: str | None = None) -> Any:
    """A `RecognizeRequest` for inline audio. `encoding`: a RecognitionConfig.AudioEncoding name
    (AUTO detects the container; LINEAR16 / LINEAR32F / MULAW / ALAW need `sample_rate`)."""
    from protos.oasr.speech.v1 import speech_pb2 as pb

    try:
        pb.RecognitionConfig.AudioEncoding.Value(encoding.upper())
    except ValueError as exc:
        names = ", ".join(pb.RecognitionConfig.AudioEncoding.keys())
        raise ValueError(f"unknown encoding {encoding!r} (one of {names})") from exc
    config = pb.RecognitionConfig(encoding=encoding.upper(), sample_rate_hertz=sample_rate, language_code=language or "",
                                  enable_word_time_offsets=word_time_offsets, max_alternatives=max_alternatives,
                                  model=model or "")
    return pb.RecognizeRequest(config=config, audio=pb.RecognitionAudio(content=audio))


def _seconds(duration: Any) -> float:
    return float(duration.seconds + duration.nanos / 1e9)


def to_recognition(response: Any) -> Recognition:
    best = [r.alternatives[0] for r in response.results if r.alternatives]
    words = [{"word": w.word, "start": _seconds(w.start_time), "end": _seconds(w.end_time),
              "confidence": w.confidence} for alt in best for w in alt.words]
    language = next((r.language_code for r in response.results if r.language_code), None)
    return Recognition(transcript=" ".join(a.transcript.strip() for a in best if a.transcript.strip()),
                       confidence=best[0].confidence if best else 0.0, words=words, language=language,
                       request_id=response.request_id, response=response)


def rpc_error(exc: Any, target: str) -> Exception:
    """The client error for a failed call (`exc` is a grpc.RpcError)."""
    import grpc

    code = exc.code()
    details = exc.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE and ("connect" in details.lower() or "resolve" in details.lower()):
        return ServerUnreachable(f"no gRPC server at {target}: {details}")
    return APIError(details, code.name)


__all__ = ["CHANNEL_OPTIONS", "DEFAULT_GRPC_PORT", "grpc_target", "metadata", "recognize_request", "rpc_error",
           "to_recognition"]
