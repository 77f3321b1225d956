"""One Deepgram live session: binary audio and control messages in, the live core's turns out
as `Results`, `SpeechStarted` and `UtteranceEnd`, and `Metadata` at `CloseStream`.

    frames ─► ListenAudio (decode, resample) ─► LiveSession (app/live): the server VAD cuts the
              stream into segments at pauses (`endpointing`), or one segment runs to `Finalize`
    segment = one engine streaming request = interim `Results` (`interim_results`) and one
              final `Results` (`is_final`; `speech_final` when an endpoint ended it,
              `from_finalize` when `Finalize` did)

`Results` go out in segment order: a later segment's messages wait for the earlier one's
final (the writer task). `SpeechStarted` goes out as soon as the VAD hears speech.
`UtteranceEnd` goes out once the audio after the last finalized word is `utterance_end_ms`
long with no segment begun in it. Times are seconds of the stream's audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np

from app.audio import AudioError
from app.deepgram import messages as msg
from app.deepgram.audio import ListenAudio
from app.deepgram.params import MIN_ENDPOINTING_MS, ListenParams, QueryError
from app.engine_service import EngineService
from app.live import (
    InputClosed,
    LiveEvent,
    LiveSession,
    SpeechBegan,
    Turn,
    TurnAborted,
    TurnFailed,
    TurnFinal,
    TurnOpened,
    TurnPartial,
    TurnRefused,
    VadBatcher,
)
from app.live.sender import EventSender
from app.requests import admit_options, build_options
from app.settings import Settings
from engine import RequestOutput
from engine.errors import EngineError, EngineShutdownError, InvalidRequestError
from engine.vad import TurnSettings

logger = logging.getLogger(__name__)

API = "deepgram"
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008
"""Bad query parameters or audio (Deepgram's DATA-0000 close)."""
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
"""The server failed, or the client went silent (Deepgram's NET-0001 close)."""
VAD_WINDOW_MS = 32

EndedBy = Literal["endpoint", "finalize", "close"]


async def say_shutting_down(sender: EventSender) -> None:
    """The goodbye of a session the server's shutdown ends: a ServerShutdown error, then 1001."""
    await sender.send(msg.error("the server is shutting down", "ServerShutdown"))
    await sender.close(CLOSE_GOING_AWAY, "server is shutting down")


@dataclass(eq=False)
class _Segment:
    """A turn's messages, in order, until its final (None ends the queue)."""

    turn: Turn
    speech_start: float
    """Seconds of stream audio where its speech began (the VAD's speech start)."""
    messages: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    ended_by: EndedBy | None = None
    ended: bool = False

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.messages.put_nowait(None)


class ListenSession:
    def __init__(self, sender: EventSender, service: EngineService, params: ListenParams, *,
                 vad: VadBatcher | None, settings: Settings, model: msg.ModelIdentity) -> None:
        """QueryError when the parameters ask for what this server or model cannot do."""
        self.id = str(uuid.uuid4())
        self.sender = sender
        self.service = service
        self.metrics = service.metrics
        self.params = params
        self.model = model
        self.rate: int = service.sample_rate
        # Deepgram's results carry word times when the model has them
        words = service.engine.model_info.capabilities.word_timestamps
        try:
            options = admit_options(service, build_options(language=params.language, keywords=params.keywords,
                                                                  word_timestamps=words), streaming=True)
        except InvalidRequestError as exc:
            raise QueryError(str(exc)) from exc
        self.live = LiveSession(service, self._on_event, options=options, vad=vad, on_turn_done=self._turn_done,
                                label=f"listen {self.id}")
        self._detection_lag = 0.0
        if self.live.vad_available:
            silence = params.endpointing_ms or max(settings.vad_silence_duration_ms, MIN_ENDPOINTING_MS)
            detection = TurnSettings(threshold=settings.vad_threshold, silence_duration_ms=silence,
                                     prefix_padding_ms=settings.vad_prefix_padding_ms)
            self.live.detect_turns(detection)
            # speech is known some audio after it starts: a gap is only certain up to there
            self._detection_lag = (detection.min_speech_ms + VAD_WINDOW_MS) / 1000
        elif params.needs_vad:
            raise QueryError("endpointing, vad_events and utterance_end_ms need the server VAD, which this server "
                             "does not offer; omit them and end segments with Finalize")
        self.audio = ListenAudio(params, self.rate)
        self.started = time.monotonic()
        self.created = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self.closing = False
        self.audio_seconds = 0.0
        self._sha256 = hashlib.sha256()
        self._segments: dict[Turn, _Segment] = {}
        self._pending: list[_Segment] = []
        """Segments whose final is not out yet, in order."""
        self._outbox: asyncio.Queue[_Segment | dict[str, Any] | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._ending: EndedBy | None = None
        self._speech_start: float | None = None
        self._last_word_end = 0.0
        self._words_since_utterance_end = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._writer = asyncio.ensure_future(self._write())

    @property
    def busy(self) -> bool:
        """A segment whose audio has ended is still being transcribed."""
        return self.live.busy

    def abort_all(self) -> None:
        """Abort every engine request and the writer (disconnect, shutdown, error). Idempotent."""
        self.live.stop()
        self.service.series.requests_cancelled.inc(self.live.abort_all())
        if self._writer is not None:
            self._writer.cancel()
        self.audio.close()

    def end(self) -> None:
        """The socket is gone: abort what is left, record the session's pace, log it."""
        self.abort_all()
        wall = time.monotonic() - self.started
        if self.audio_seconds > 0 and wall > 0:
            self.metrics.stream_realtime_factor.observe(self.audio_seconds / wall)
        logger.info("listen %s closed after %.1f s (%.1f s of %s audio)", self.id, wall, self.audio_seconds,
                    self.audio.format or "no")

    async def drain(self) -> None:
        """Server shutdown: close with 1001 right away; unfinished segments get no final."""
        self.closing = True
        self.abort_all()
        await say_shutting_down(self.sender)

    async def fail(self, code: int, description: str, variant: str) -> None:
        """End the session: an `Error` message with the whole story, then a close frame."""
        self.closing = True
        self.live.stop()
        logger.info("listen %s: closing (%d): %s", self.id, code, description)
        await self.sender.send(msg.error(description, variant))
        await self.sender.close(code, description)

    def _turn_done(self, turn: Turn) -> None:
        segment = self._segments.pop(turn, None)
        if segment is not None:
            segment.end()  # a pump that died without a final must not hold the writer
        self.metrics.request_duration.labels(api=API, mode="streaming", outcome=turn.outcome).observe(
            time.monotonic() - turn.opened_at)

    # ------------------------------------------------------------------ client messages

    async def handle_binary(self, data: bytes) -> None:
        if self.closing:
            return
        if not data:  # Deepgram's original end-of-stream signal: an empty binary message
            await self.close_stream()
            return
        self._sha256.update(data)
        try:
            samples = await self.audio.push(data)
        except AudioError as exc:
            await self.fail(CLOSE_POLICY, f"DATA-0000: {exc}", "DataError")
            return
        await self._push(samples)

    async def handle_text(self, text: str) -> None:
        if self.closing:
            return
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "KeepAlive":
            return
        if kind == "Finalize":
            await self.finalize()
        elif kind == "CloseStream":
            await self.close_stream()
        else:
            await self.sender.send(msg.error(
                "a text message must be JSON with type KeepAlive, Finalize or CloseStream; send audio in binary "
                "messages", "SchemaError", text[:500]))

    async def finalize(self) -> None:
        """End the segment in progress now (its final has `from_finalize: true`); with none in
        progress, an empty final says so."""
        self._ending = "finalize"
        try:
            ended = await self.live.end_turn(self.audio.cut())
        finally:
            self._ending = None
        if not ended:
            self._outbox.put_nowait(self._results(start=self.live.clock / self.rate, duration=0.0, text="",
                                                  output=None, is_final=True, speech_final=False,
                                                  from_finalize=True))

    async def close_stream(self) -> None:
        """Transcribe what is left, send every final and the Metadata, then close (1000)."""
        if self.closing:
            return
        self.closing = True
        try:
            await self._push(await self.audio.flush())
        except AudioError as exc:
            await self.fail(CLOSE_POLICY, f"DATA-0000: {exc}", "DataError")
            return
        self._ending = "close"
        await self.live.end_turn()
        self.live.stop()
        self._outbox.put_nowait(None)
        if self._writer is not None:
            await self._writer
        await self.sender.send(msg.metadata(request_id=self.id, model=self.model, sha256=self._sha256.hexdigest(),
                                            created=self.created, duration=self.audio_seconds,
                                            channels=self.params.channels))
        await self.sender.close(CLOSE_NORMAL, "")

    async def _push(self, samples: np.ndarray) -> None:
        if samples.size == 0 or self.live.stopped:
            return
        seconds = samples.size / self.rate
        self.audio_seconds += seconds
        self.metrics.audio_seconds.labels(api=API, mode="streaming").inc(seconds)
        try:
            await self.live.push(samples)
        except EngineError as exc:  # one segment until Finalize: its request was refused
            await self._refused(exc)
            return
        await self._check_utterance_end()

    async def _refused(self, exc: EngineError) -> None:
        if isinstance(exc, EngineShutdownError):
            await self.fail(CLOSE_GOING_AWAY, "server is shutting down", "ServerShutdown")
        else:
            await self.fail(CLOSE_INTERNAL, f"recognition request refused: {exc}", "ServerError")

    # ------------------------------------------------------------------ turn events

    async def _on_event(self, event: LiveEvent) -> None:
        if isinstance(event, SpeechBegan):
            self._speech_start = event.speech_start_ms / 1000
            if self.params.vad_events:
                await self.sender.send(msg.speech_started(self._speech_start))
        elif isinstance(event, TurnOpened):
            turn = event.turn
            start = self._speech_start if self._speech_start is not None else turn.start / self.rate
            self._speech_start = None
            opened = _Segment(turn, start)
            self._segments[turn] = opened
            self._pending.append(opened)
            self._outbox.put_nowait(opened)
        elif isinstance(event, TurnRefused):
            await self._refused(event.error)
        elif isinstance(event, InputClosed):
            if (closed := self._segments.get(event.turn)) is not None:
                closed.ended_by = self._ending or "endpoint"
        elif isinstance(event, TurnPartial | TurnFinal | TurnFailed | TurnAborted) and event.turn in self._segments:
            await self._on_output(self._segments[event.turn], event)

    async def _on_output(self, segment: _Segment, event: TurnPartial | TurnFinal | TurnFailed | TurnAborted) -> None:
        turn, out = segment.turn, event.output
        if isinstance(event, TurnPartial):
            if turn.partials == 1:
                self.metrics.time_to_first_partial.labels(api=API).observe(time.monotonic() - turn.opened_at)
            if self.params.interim_results:
                segment.messages.put_nowait(self._results(
                    start=turn.start / self.rate, duration=turn.covered(out, self.rate) / self.rate, text=out.text,
                    output=out, is_final=False, speech_final=False, from_finalize=False))
            return
        if isinstance(event, TurnFinal):
            if turn.input_closed_at is not None:
                await turn.closed.wait()  # `ended_by` is set when the input closes
            ended_by = segment.ended_by
            segment.messages.put_nowait(self._results(
                start=turn.start / self.rate, duration=turn.fed / self.rate, text=out.text, output=out, is_final=True,
                speech_final=ended_by == "endpoint" and self.params.endpointing_ms is not None,
                from_finalize=ended_by == "finalize"))
        segment.end()
        if isinstance(event, TurnFailed):
            if event.shutdown:
                await self.fail(CLOSE_GOING_AWAY, "server is shutting down", "ServerShutdown")
            else:
                await self.fail(CLOSE_INTERNAL, f"recognition failed at {out.error_stage}: {out.error}", "ServerError")

    def _results(self, *, start: float, duration: float, text: str, output: RequestOutput | None, is_final: bool,
                 speech_final: bool, from_finalize: bool) -> dict[str, Any]:
        formatted = self.params.formatted
        words = msg.render_words(output.words or [], start, formatted) if output is not None else []
        if output is not None and output.confidence is not None:
            confidence = output.confidence
        else:  # the mean of the words' confidences; 0 when the engine gave neither
            confidence = sum(w["confidence"] for w in words) / len(words) if words else 0.0
        transcript = " ".join(text.split()) if formatted else msg.plain_text(text)
        return msg.results(request_id=self.id, model=self.model, start=start, duration=duration,
                           transcript=transcript, confidence=confidence, words=words, is_final=is_final,
                           speech_final=speech_final, from_finalize=from_finalize)

    # ------------------------------------------------------------------ the writer

    async def _write(self) -> None:
        """Sends segments' messages in segment order (and the odd message queued between them)."""
        while (item := await self._outbox.get()) is not None:
            if isinstance(item, dict):
                await self.sender.send(item)
                continue
            while (message := await item.messages.get()) is not None:
                if not message["is_final"] and not item.messages.empty():
                    continue  # a newer result of this segment is already waiting
                await self.sender.send(message)
                if message["is_final"]:
                    self._heard(message)
            with contextlib.suppress(ValueError):
                self._pending.remove(item)
            await self._check_utterance_end()

    def _heard(self, results: dict[str, Any]) -> None:
        """A final went out: note where its last word ended."""
        alternative = results["channel"]["alternatives"][0]
        if alternative["words"]:
            self._last_word_end = alternative["words"][-1]["end"]
        elif alternative["transcript"]:  # words without times: the segment's end stands in
            self._last_word_end = results["start"] + results["duration"]
        else:
            return
        self._words_since_utterance_end = True

    async def _check_utterance_end(self) -> None:
        """UtteranceEnd once `utterance_end_ms` of audio after the last finalized word holds no
        speech: up to the first pending segment's speech, or the audio received so far less
        what the VAD has not judged yet."""
        limit_ms = self.params.utterance_end_ms
        if limit_ms is None or not self._words_since_utterance_end:
            return
        if self._pending:
            horizon = self._pending[0].speech_start
        else:
            horizon = self.live.clock / self.rate - self._detection_lag
        if (horizon - self._last_word_end) * 1000 >= limit_ms:
            self._words_since_utterance_end = False
            await self.sender.send(msg.utterance_end(self._last_word_end))
