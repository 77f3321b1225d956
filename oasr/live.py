"""Live transcription over `/v1/realtime`: PCM chunks in, `StreamEvent`s out, across dropped
connections (oasr/realtime.py resumes the session and replays what was missed).

The session runs manual turns by default: all the audio is one utterance, committed when the
chunks end, and the stream ends with its final. With `vad=True` the server's voice-activity
detection cuts utterances as it hears them (one final each); the last one is committed when
the chunks end. The stream ends once every committed utterance has its final (or failed) event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from oasr.realtime import ResumeRefused, ResumingRealtimeClient
from oasr.types import StreamError, StreamEvent

logger = logging.getLogger(__name__)

DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"
FAILED = "conversation.item.input_audio_transcription.failed"
COMMITTED = "input_audio_buffer.committed"
SPEECH_STARTED = "input_audio_buffer.speech_started"
SPEECH_STOPPED = "input_audio_buffer.speech_stopped"
COMMIT_EMPTY = "input_audio_buffer_commit_empty"
"""Error code of a commit with no audio (or, under VAD, no speech) since the last utterance."""


def realtime_url(base_url: str) -> str:
    """The WebSocket URL of `/v1/realtime` for an http(s) base URL."""
    base = base_url.rstrip("/")
    for http, ws in (("https://", "wss://"), ("http://", "ws://")):
        if base.startswith(http):
            base = ws + base[len(http):]
    return f"{base}/v1/realtime?intent=transcription"


def session_update(rate: int, language: str | None, vad: bool | None, prompt: str | None) -> dict[str, Any]:
    """The GA `session.update` for a transcription session taking 16-bit PCM at `rate` Hz."""
    transcription: dict[str, Any] = {}
    if language:
        transcription["language"] = language
    if prompt:
        transcription["prompt"] = prompt
    audio_input: dict[str, Any] = {"format": {"type": "audio/pcm", "rate": rate}, "transcription": transcription}
    if vad is not None:  # None keeps the server's default (server VAD where it has a VAD model)
        audio_input["turn_detection"] = {"type": "server_vad"} if vad else None
    # OASR's tentative text (an opt-in extension): partials show words that may still change too
    return {"type": "session.update", "session": {"type": "transcription", "audio": {"input": audio_input},
                                                  "include": ["item.input_audio_transcription.tentative"]}}


class _Turns:
    """Server events -> StreamEvents, and whether every utterance has been answered."""

    def __init__(self) -> None:
        self.text: dict[str, str] = {}
        self.open: set[str] = set()
        """Committed utterances without their final yet."""
        self.last_commit_sent = False
        self.last_commit_answered = False

    @property
    def done(self) -> bool:
        return self.last_commit_answered and not self.open

    def convert(self, event: dict[str, Any]) -> StreamEvent | None:
        kind = event.get("type")
        item = str(event.get("item_id", ""))
        end_ms = event.get("audio_end_ms")
        if kind == DELTA:  # deltas only append; `committed` + `tentative` (extensions) is the whole text so far
            self.text[item] = self.text.get(item, "") + str(event.get("delta", ""))
            text = str(event["committed"]) + str(event["tentative"]) if "tentative" in event else self.text[item]
            return StreamEvent("partial", item, text, False, end_ms, event)
        if kind == COMPLETED:
            self.open.discard(item)
            return StreamEvent("final", item, str(event.get("transcript", "")), True, end_ms, event)
        if kind == FAILED:
            self.open.discard(item)
            return StreamEvent("failed", item, str(event.get("error", {}).get("message", "")), True, end_ms, event)
        if kind == COMMITTED:
            self.open.add(item)
            # Under VAD an utterance the server cut itself may be committed just after the last
            # commit went out and be taken for its answer; the last commit then finds no speech.
            self.last_commit_answered = self.last_commit_answered or self.last_commit_sent
        elif kind in (SPEECH_STARTED, SPEECH_STOPPED):
            return StreamEvent("speech_started" if kind == SPEECH_STARTED else "speech_stopped", item,
                               audio_end_ms=event.get("audio_start_ms", end_ms), raw=event)
        elif kind == "session.resumed":
            return StreamEvent("resumed", "", audio_end_ms=event.get("audio_end_ms"), raw=event)
        elif kind == "error":
            error = event.get("error") or {}
            if error.get("code") == COMMIT_EMPTY and self.last_commit_sent:
                self.last_commit_answered = True  # nothing left to transcribe
                return None
            raise StreamError(f"server error ({error.get('code')}): {error.get('message')}")
        return None


async def _chunks_async(chunks: Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield chunk
        return
    iterator = iter(chunks)
    while True:
        item: bytes | None = await asyncio.to_thread(_next_chunk, iterator)  # a microphone read blocks
        if item is None:
            return
        yield item


def _next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)


async def stream_events(client: ResumingRealtimeClient, chunks: Iterable[bytes] | AsyncIterable[bytes], *,
                        update: dict[str, Any], pace_s: float | None = None) -> AsyncIterator[StreamEvent]:
    """Run one session on a connected `client`: send `update`, then the chunks (each `pace_s`
    after the previous one's due time when given, else as fast as they come), then a commit;
    yield the session's events until every utterance is answered. Closes the client."""
    turns = _Turns()

    async def send() -> None:
        try:
            await client.send_event(update)
            loop = asyncio.get_running_loop()
            started, sent = loop.time(), 0
            async for chunk in _chunks_async(chunks):
                if pace_s is not None:  # against the start time, so delays never add up
                    await asyncio.sleep(max(0.0, started + sent * pace_s - loop.time()))
                await client.send_audio(chunk)
                sent += 1
            turns.last_commit_sent = True
            await client.commit()
        except Exception as exc:  # the audio source failed: end the stream with its error
            client.fail(exc)

    sender = asyncio.ensure_future(send())
    try:
        async for event in client.events():
            converted = turns.convert(event)
            if converted is not None:
                yield converted
            if turns.done:
                return
        raise StreamError("the server closed the session before every utterance was transcribed")
    except ResumeRefused as exc:
        raise StreamError(str(exc)) from exc
    finally:
        sender.cancel()
        # awaited: a send cut off mid-frame leaves websockets' send_context generator open, which
        # the loop's shutdown then closes while it runs ("aclose(): asynchronous generator is
        # already running")
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender
        await client.close()


__all__ = ["realtime_url", "session_update", "stream_events"]
