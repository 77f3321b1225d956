"""Server events of the realtime transcription protocol, and the error a client event can cause.

Every server event is a plain dict with a unique `event_id`. Transcription events also carry
two OASR extension fields that stock clients ignore:

- `audio_end_ms`: end of the audio the event covers, in session audio time (ms);
- `server_ms`: wall time from when the server had that audio (for `completed`: when the turn
  was committed) to when it sent the event — the server's own latency, measured where it occurs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

ERROR_TYPE = "invalid_request_error"
SERVER_ERROR_TYPE = "server_error"


def new_id(prefix: str) -> str:
    """A unique id in OpenAI's style (`event_…`, `item_…`, `sess_…`)."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def server_event(event_type: str, **fields: Any) -> dict[str, Any]:
    return {"type": event_type, "event_id": new_id("event"), **fields}


class ProtocolError(Exception):
    """A client event that cannot be served; becomes one `error` event, the session goes on."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        param: str | None = None,
        error_type: str = ERROR_TYPE,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.error_type = error_type

    def event(self, client_event_id: str | None = None) -> dict[str, Any]:
        return error_event(self.message, code=self.code, param=self.param, error_type=self.error_type,
                           client_event_id=client_event_id)


def error_event(
    message: str,
    *,
    code: str,
    param: str | None = None,
    error_type: str = ERROR_TYPE,
    client_event_id: str | None = None,
) -> dict[str, Any]:
    """OpenAI's `error` event; `event_id` inside names the client event that caused it."""
    return server_event("error", error={"type": error_type, "code": code, "message": message, "param": param,
                                        "event_id": client_event_id})


def speech_started(item_id: str, audio_start_ms: int, speech_start_ms: int) -> dict[str, Any]:
    """`audio_start_ms` includes the prefix padding (as OpenAI's); `speech_start_ms` (extension)
    is where the detector heard speech begin."""
    return server_event("input_audio_buffer.speech_started", item_id=item_id, audio_start_ms=audio_start_ms,
                        speech_start_ms=speech_start_ms)


def speech_stopped(item_id: str, audio_end_ms: int, speech_end_ms: int) -> dict[str, Any]:
    """`audio_end_ms` includes the suffix padding; `speech_end_ms` (extension) is where speech ended."""
    return server_event("input_audio_buffer.speech_stopped", item_id=item_id, audio_end_ms=audio_end_ms,
                        speech_end_ms=speech_end_ms)


def committed(item_id: str, previous_item_id: str | None) -> dict[str, Any]:
    return server_event("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous_item_id)


def timeout_triggered(item_id: str, audio_start_ms: int, audio_end_ms: int) -> dict[str, Any]:
    """server_vad `idle_timeout_ms`: no speech from `audio_start_ms` to `audio_end_ms`."""
    return server_event("input_audio_buffer.timeout_triggered", item_id=item_id, audio_start_ms=audio_start_ms,
                        audio_end_ms=audio_end_ms)


def user_audio_item(item_id: str, transcript: str | None) -> dict[str, Any]:
    """The conversation item a committed turn becomes (its audio is not echoed back)."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
            "status": "completed", "content": [{"type": "input_audio", "transcript": transcript}]}


def item_added(item_id: str, previous_item_id: str | None, *, beta: bool) -> dict[str, Any]:
    """At commit: GA `conversation.item.added`, beta `conversation.item.created`."""
    name = "conversation.item.created" if beta else "conversation.item.added"
    return server_event(name, previous_item_id=previous_item_id, item=user_audio_item(item_id, None))


def item_done(item_id: str, transcript: str | None) -> dict[str, Any]:
    """GA `conversation.item.done`: the item with its final transcript (null when it failed)."""
    return server_event("conversation.item.done", item=user_audio_item(item_id, transcript))


def logprob_entries(tokens: Sequence[bytes], logprobs: Sequence[float]) -> list[dict[str, Any]]:
    """OpenAI's logprobs array: one {token, logprob, bytes} per token."""
    return [{"token": b.decode("utf-8", errors="replace"), "logprob": lp, "bytes": list(b)}
            for b, lp in zip(tokens, logprobs)]


def cleared() -> dict[str, Any]:
    return server_event("input_audio_buffer.cleared")


def transcription_delta(
    item_id: str,
    delta: str,
    *,
    committed_text: str,
    tentative_text: str | None,
    audio_end_ms: int,
    server_ms: int,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An append-only increment of the item's text: the item's deltas join to its `completed`
    transcript. `committed` (extension) is the text so far, which never changes except by growing;
    `tentative` (extension, only for sessions that include it) is text after it that may still be
    revised."""
    event = server_event("conversation.item.input_audio_transcription.delta", item_id=item_id, content_index=0,
                         delta=delta)
    if logprobs is not None:
        event["logprobs"] = logprobs
    event["committed"] = committed_text
    if tentative_text is not None:
        event["tentative"] = tentative_text
    event.update(audio_end_ms=audio_end_ms, server_ms=server_ms)
    return event


def transcription_completed(
    item_id: str,
    transcript: str,
    *,
    audio_seconds: float,
    finish_reason: str | None,
    language: str | None,
    audio_end_ms: int,
    server_ms: int,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    event = server_event("conversation.item.input_audio_transcription.completed", item_id=item_id,
                         content_index=0, transcript=transcript,
                         usage={"type": "duration", "seconds": round(audio_seconds, 3)})
    if logprobs is not None:
        event["logprobs"] = logprobs
    if finish_reason:
        event["finish_reason"] = finish_reason
    if language:
        event["language"] = language
    event.update(audio_end_ms=audio_end_ms, server_ms=server_ms)
    return event


def transcription_failed(item_id: str, message: str, *, code: str, audio_end_ms: int,
                         server_ms: int) -> dict[str, Any]:
    """The item's terminal event when recognition failed (OpenAI's `...transcription.failed`)."""
    return server_event("conversation.item.input_audio_transcription.failed", item_id=item_id, content_index=0,
                        error={"type": SERVER_ERROR_TYPE, "code": code, "message": message, "param": None},
                        finish_reason="error", audio_end_ms=audio_end_ms, server_ms=server_ms)
