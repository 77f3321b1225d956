"""What the clients return, and the errors they raise.

    OASRError
    ├── APIError            the server answered with an error (HTTP status or gRPC code, its message)
    ├── ServerUnreachable   no server answered at the URL / gRPC target
    └── StreamError         a realtime session failed: an error event, a refused resume, an early close
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


class OASRError(Exception):
    """Base class of every error the OASR clients raise on purpose."""


class APIError(OASRError):
    """The server refused or failed the request."""

    def __init__(self, message: str, status: int | str, body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        """HTTP status code (int) or gRPC status name (str, e.g. 'INVALID_ARGUMENT')."""
        self.body = body
        """The parsed error body (HTTP), when there was one."""

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


class ServerUnreachable(OASRError):
    """Nothing answered at the server's address (refused, DNS, connect timeout)."""


class StreamError(OASRError):
    """A realtime session ended with an error."""


@dataclass(frozen=True)
class Transcription:
    """A transcript from `/v1/audio/transcriptions` or `/v1/audio/translations`."""

    text: str
    """The transcript; for `srt` / `vtt` / `text` responses, the whole body as sent."""
    language: str | None = None
    duration: float | None = None
    """Seconds of audio (verbose_json)."""
    segments: list[dict[str, Any]] = field(default_factory=list)
    """verbose_json segments: {id, start, end, text, ...}."""
    words: list[dict[str, Any]] = field(default_factory=list)
    """verbose_json words ({word, start, end, ...}): empty unless word timestamps were asked for."""
    raw: Any = None
    """The response body: the parsed JSON object, or the text of a text/srt/vtt response."""


StreamEventType = Literal["speech_started", "speech_stopped", "partial", "final", "failed", "resumed"]
"""'resumed': the connection dropped and the session was resumed on a new one (nothing was lost)."""


@dataclass(frozen=True)
class StreamEvent:
    """One event of a live transcription: an utterance (item) grows through partials to one final."""

    type: StreamEventType
    item_id: str
    """The utterance this event belongs to (one per committed turn)."""
    text: str = ""
    """The utterance's whole text so far (partial) or its transcript (final); empty for speech events."""
    is_final: bool = False
    """True once the text will not change (type 'final')."""
    audio_end_ms: int | None = None
    """Session audio time (ms) the event covers up to."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The server event it was made from."""


@dataclass(frozen=True)
class Recognition:
    """A gRPC `Recognize` answer: the best transcript, and the whole response."""

    transcript: str
    """Best alternatives' transcripts of every result, joined by spaces."""
    confidence: float
    """Confidence of the first result's best alternative."""
    words: list[dict[str, Any]]
    """{word, start, end, confidence} of the best alternatives, when word offsets were asked for."""
    language: str | None
    request_id: str
    response: Any
    """The `RecognizeResponse` message."""


__all__ = ["APIError", "OASRError", "Recognition", "ServerUnreachable", "StreamError", "StreamEvent",
           "StreamEventType", "Transcription"]
