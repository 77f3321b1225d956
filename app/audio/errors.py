"""The audio error hierarchy; every exception carries the HTTP `status_code` a route answers with."""

from __future__ import annotations

__all__ = ["AudioDecodeError", "AudioError", "AudioTooLongError", "UnsupportedAudioError"]


class AudioError(Exception):
    """Base class of every audio problem reported to a client; `status_code` is the HTTP status."""

    status_code: int = 400


class AudioDecodeError(AudioError, ValueError):
    """The body is not decodable audio: empty, garbage, truncated, corrupt, or its parameters are wrong."""

    status_code = 400


class UnsupportedAudioError(AudioError, ValueError):
    """The encoding, codec or sample rate is valid in general but not one this server accepts."""

    status_code = 400


class AudioTooLongError(AudioError):
    """The audio is longer than the caller's `max_seconds` (HTTP 413 Content Too Large)."""

    status_code = 413
