"""One error type for every HTTP surface, rendered in each API's own envelope."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.audio import AudioError
from engine.errors import EngineError, EngineOverloadedError, EngineShutdownError, InvalidRequestError

GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    413: "RESOURCE_EXHAUSTED",  # as gRPC answers an oversize message
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}

OPENAI_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    501: "invalid_request_error",
    503: "server_error",
}


GOOGLE_PATH_PREFIXES = ("/v1/speech", "/v1/operations")
"""Routes answering errors in Google's envelope; every other one uses OpenAI's."""


def google_shaped(path: str) -> bool:
    return path.startswith(GOOGLE_PATH_PREFIXES)


class ModelNotFound(EngineError):
    """The request names a model this server does not serve (HTTP 404, gRPC NOT_FOUND)."""

    def __init__(self, model: str, served: str | Sequence[str]):
        names = [served] if isinstance(served, str) else list(served)
        super().__init__(f"model {model!r} does not exist; this server serves {', '.join(map(repr, names))}")
        self.model = model


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 status_name: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds a client should wait before retrying (sent as Retry-After; gRPC pushback)."""
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.status_name = status_name
        """Google status name when the HTTP status alone does not say it (FAILED_PRECONDITION is a 400)."""

    def openai_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": OPENAI_TYPE.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}

    def google_body(self) -> dict[str, Any]:
        return {"error": {"code": self.status, "status": self.status_name or GOOGLE_STATUS.get(self.status, "UNKNOWN"),
                          "message": self.message}}


def to_api_error(exc: Exception) -> ApiError:
    """Map engine and audio errors onto HTTP statuses."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ModelNotFound):
        return ApiError(404, str(exc), param="model", code="model_not_found")
    if isinstance(exc, AudioError):
        return ApiError(exc.status_code, str(exc), param="file")
    if isinstance(exc, EngineOverloadedError):  # over capacity, retry with backoff (seed 001's table)
        return ApiError(503, str(exc), status_name="RESOURCE_EXHAUSTED")
    if isinstance(exc, EngineShutdownError):
        return ApiError(503, str(exc))
    if isinstance(exc, InvalidRequestError):
        return ApiError(400, str(exc))
    if isinstance(exc, EngineError):
        return ApiError(500, str(exc))
    raise exc
