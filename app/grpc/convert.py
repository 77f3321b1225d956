"""Errors -> gRPC status codes for `oasr.speech.v1` (the conversions of its messages are
transport-neutral, in app/google/convert.py).

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

import grpc

from app.admission import Refused
from app.audio import AudioError
from app.errors import ApiError, ModelNotFound
from engine.errors import EngineError, EngineOverloadedError, EngineShutdownError, InvalidRequestError
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

    def __init__(self, code: grpc.StatusCode, message: str, *, retry_after: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.trailing_metadata: tuple[tuple[str, str], ...] = ()
        """Sent with the status; `grpc-retry-pushback-ms` tells gRPC's retry policy when to retry."""
        if retry_after is not None:
            self.trailing_metadata = (("grpc-retry-pushback-ms", str(retry_after * 1000)),)


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
    if isinstance(exc, ModelNotFound):
        return RpcError(grpc.StatusCode.NOT_FOUND, str(exc))
    if isinstance(exc, InvalidRequestError):
        return invalid(str(exc))
    if isinstance(exc, Refused):  # admission: shutting down (no hint) or retry after the hint
        code = grpc.StatusCode.UNAVAILABLE if exc.retry_after is None else grpc.StatusCode.RESOURCE_EXHAUSTED
        return RpcError(code, exc.message, retry_after=exc.retry_after)
    if isinstance(exc, ApiError):
        if exc.status == 503:
            # a permit refused while draining, or work cancelled by the drain -> UNAVAILABLE;
            # a permit refused for capacity -> RESOURCE_EXHAUSTED (retry later)
            code = grpc.StatusCode.UNAVAILABLE if draining else grpc.StatusCode.RESOURCE_EXHAUSTED
            return RpcError(code, exc.message, retry_after=exc.retry_after)
        return RpcError(HTTP_TO_GRPC.get(exc.status, grpc.StatusCode.INTERNAL), exc.message)
    if isinstance(exc, EngineError):
        return RpcError(grpc.StatusCode.INTERNAL, str(exc))
    raise exc


