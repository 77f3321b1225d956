"""Exceptions the engine raises at its public API.

    EngineError
    ├── InvalidRequestError      bad audio or options, raised at admission (HTTP 400 / INVALID_ARGUMENT)
    │   └── UnsupportedError     valid request the loaded model cannot serve (e.g. translate on .en)
    ├── UnknownRequestError      request id not known to the engine (404 / NOT_FOUND)
    ├── EngineOverloadedError    no capacity left to admit (503 / RESOURCE_EXHAUSTED)
    ├── EngineShutdownError      engine is shut down (503 / UNAVAILABLE)
    └── CheckpointError          checkpoint directory unreadable or inconsistent (at load)
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class InvalidRequestError(EngineError, ValueError):
    """The request (audio or decoding options) is malformed or out of range."""


class UnsupportedError(InvalidRequestError):
    """The request is well formed but the loaded model cannot serve it."""


class UnknownRequestError(EngineError, KeyError):
    """No request with that id is known to the engine."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown request"


class EngineOverloadedError(EngineError):
    """The engine has no capacity left to admit the request."""


class EngineShutdownError(EngineError):
    """The engine has been shut down and takes no new work."""


class CheckpointError(EngineError):
    """A checkpoint directory cannot be loaded; the message names the offending file or key."""
