"""One realtime transcription session: client events in, turns to the engine, events out.

    audio ─► decode ─► StreamResampler (→ model rate) ─┬─ manual commits: the open turn
                                                       └─ server VAD: TurnDetector ─► turns
    turn = one engine streaming request = one item; its pump task renders the engine's
    outputs as `delta` events and exactly one `completed` (or `failed`) once committed.

The session clock is the resampled audio received so far (model-rate samples), so every
`*_ms` field is audio time from the start of the session. Silence between server-VAD turns
never reaches the engine. The owner (the WebSocket route) calls `abort_all()` in its
`finally`, which aborts every engine request the session still has open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.audio import StreamResampler
from app.engine_service import EngineService
from app.live.turn import Turn, elapsed_ms, samples_ms
from app.live.vad import VadBatcher
from app.realtime import events as ev
from app.realtime.audio_input import decode_base64, decode_chunk
from app.realtime.config import (
    SessionConfig,
    TranscriptionConfig,
    VadSettings,
    parse_beta_update,
    parse_ga_update,
)
from app.realtime.events import ProtocolError
from app.realtime.sender import EventSender
from engine import DecodingOptions, RequestOutput
from engine.errors import EngineError, EngineShutdownError, InvalidRequestError, UnknownRequestError
from engine.vad import SAMPLE_RATE as VAD_SAMPLE_RATE
from engine.vad import (
    SpeechStarted,
    SpeechStopped,
    TurnAudio,
    TurnDetector,
    TurnEvent,
    TurnSettings,
)

logger = logging.getLogger(__name__)

API = "realtime"

CLIENT_EVENTS = ("session.update", "transcription_session.update", "input_audio_buffer.append",
                 "input_audio_buffer.commit", "input_audio_buffer.clear")
# Client events of OpenAI's conversation sessions: known, but meaningless for transcription.
CONVERSATION_EVENTS = frozenset({
    "conversation.item.create", "conversation.item.retrieve", "conversation.item.truncate",
    "conversation.item.delete", "response.create", "response.cancel", "output_audio_buffer.clear",
})


class RealtimeSession:
    def __init__(
        self,
        sender: EventSender,
        service: EngineService,
        *,
        vad_batcher: VadBatcher | None,
        vad: VadSettings,
        served_model_name: str | None = None,
        beta: bool = False,
    ) -> None:
        self.id = ev.new_id("sess")
        self.sender = sender
        self.service = service
        self.metrics = service.metrics
        self.rate: int = service.engine.sample_rate
        self.vad = vad
        # Server VAD scores 16 kHz audio; offered only when the model runs at that rate too.
        self._vad = vad_batcher if self.rate == VAD_SAMPLE_RATE else None
        self._served_model_name = served_model_name
        self.beta = beta
        self.config = SessionConfig(server_vad=self._vad is not None)
        self._options = DecodingOptions(task="transcribe")
        self._resampler = StreamResampler(self.config.input_format.rate, self.rate)
        self._clock = 0
        """Model-rate samples the pipeline has produced (the session's audio time)."""
        self._detector: TurnDetector | None = None
        self._vad_origin = 0
        """Session clock where the current detector started (its times are relative to it)."""
        self._vad_item_id: str | None = None
        self._current: Turn | None = None
        self._turns: set[Turn] = set()
        self._previous_item_id: str | None = None
        self._lock = asyncio.Lock()
        self.draining = False
        self.started = time.monotonic()
        self.audio_seconds = 0.0

    # ------------------------------------------------------------------ lifecycle

    @property
    def busy(self) -> bool:
        """A committed turn is still being transcribed (its events are still to come). An open,
        uncommitted turn does not count: a client that stops sending mid-turn is idle."""
        return any(t.committed.is_set() for t in self._turns)

    def render(self, beta: bool) -> dict[str, Any]:
        return self.config.render_beta(self.id, self.vad) if beta else self.config.render_ga(self.id, self.vad)

    async def start(self) -> None:
        name = "transcription_session.created" if self.beta else "session.created"
        await self.sender.send(ev.server_event(name, session=self.render(self.beta)))

    async def drain(self) -> None:
        """Server shutdown: fail the committed items still being transcribed, close with 1001."""
        self.draining = True
        pending = [t for t in self._turns if t.committed.is_set() and not t.answered]
        self.abort_all()
        for turn in pending:
            await self.sender.send(ev.transcription_failed(
                turn.item_id, "server is shutting down", code="server_shutting_down",
                audio_end_ms=samples_ms(turn.start + turn.fed, self.rate), server_ms=0))
        await self.sender.close(1001, "server is shutting down")

    def abort_all(self) -> None:
        """Abort every engine request of the session (disconnect, shutdown). Idempotent."""
        for turn in list(self._turns):
            self._abort(turn)
        self._current = None

    def _abort(self, turn: Turn) -> None:
        if turn.pump is not None and not turn.pump.done():
            turn.pump.cancel()
            self.metrics.requests_cancelled.inc()
        self.service.close(turn.request_id)
        self._turns.discard(turn)
        if self._current is turn:
            self._current = None

    # ------------------------------------------------------------------ client events

    async def handle_text(self, text: str) -> None:
        client_event_id: str | None = None
        try:
            try:
                event = json.loads(text)
            except ValueError as exc:
                raise ProtocolError(f"the message is not valid JSON: {exc}", code="invalid_json") from exc
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise ProtocolError("a client event must be a JSON object with a string 'type'",
                                    code="invalid_event", param="type")
            if isinstance(event.get("event_id"), str):
                client_event_id = event["event_id"]
            await self._dispatch(event)
        except ProtocolError as exc:
            await self.sender.send(exc.event(client_event_id))
        except Exception as exc:  # a bug must cost one event, not the session
            await self._internal_error(exc, client_event_id)

    async def handle_binary(self, data: bytes) -> None:
        """A binary frame: the same raw audio as `input_audio_buffer.append`, without base64."""
        try:
            await self._append(data)
        except ProtocolError as exc:
            await self.sender.send(exc.event())
        except Exception as exc:
            await self._internal_error(exc, None)

    async def _internal_error(self, exc: Exception, client_event_id: str | None) -> None:
        logger.exception("session %s: event failed", self.id)
        await self.sender.send(ev.error_event(f"internal error: {type(exc).__name__}: {exc}", code="internal_error",
                                              error_type=ev.SERVER_ERROR_TYPE, client_event_id=client_event_id))

    async def _dispatch(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "session.update":
            await self._update(parse_ga_update(event, self.config, self.vad), beta=False)
        elif kind == "transcription_session.update":
            await self._update(parse_beta_update(event, self.config, self.vad), beta=True)
        elif kind == "input_audio_buffer.append":
            await self._append(decode_base64(event.get("audio")))
        elif kind == "input_audio_buffer.commit":
            await self._commit()
        elif kind == "input_audio_buffer.clear":
            await self._clear()
        elif kind in CONVERSATION_EVENTS:
            raise ProtocolError(f"{kind} is not supported in a transcription session", code="unsupported_event",
                                param="type")
        else:
            raise ProtocolError(f"unknown event type {kind!r}; a transcription session accepts "
                                f"{', '.join(CLIENT_EVENTS)} and binary audio frames",
                                code="unknown_event_type", param="type")

    async def _update(self, config: SessionConfig, *, beta: bool) -> None:
        async with self._lock:
            old = self.config
            audio_changed = config.input_format != old.input_format or config.server_vad != old.server_vad
            if audio_changed and self._current is not None:
                raise ProtocolError("the audio format and turn detection cannot change while a turn is open; "
                                    "commit or clear the input audio buffer first",
                                    code="session_update_with_buffered_audio", param="session")
            if config.server_vad and self._vad is None:
                raise ProtocolError("server VAD is not available on this server; use turn_detection null and "
                                    "commit turns yourself", code="server_vad_unavailable",
                                    param="session.turn_detection")
            self._options = self._decoding_options(config.transcription, beta)
            if config.input_format != old.input_format:
                self._resampler = StreamResampler(config.input_format.rate, self.rate)
            if audio_changed:
                self._restart_vad()
            self.config = config
        name = "transcription_session.updated" if beta else "session.updated"
        await self.sender.send(ev.server_event(name, session=self.render(beta)))

    def _decoding_options(self, tc: TranscriptionConfig, beta: bool) -> DecodingOptions:
        param = "session.input_audio_transcription" if beta else "session.audio.input.transcription"
        if self._served_model_name and tc.model and tc.model != self._served_model_name:
            raise ProtocolError(f"model {tc.model!r} does not exist; this server serves {self._served_model_name!r}",
                                code="model_not_found", param=f"{param}.model")
        options = DecodingOptions(task="transcribe", language=tc.language.lower() if tc.language else None,
                                  prompt=tc.prompt)
        try:
            options.validate()
            self.service.engine.runner.check_options(options, True)
        except InvalidRequestError as exc:
            raise ProtocolError(str(exc), code="invalid_value", param=param) from exc
        return options

    # ------------------------------------------------------------------ audio

    async def _append(self, data: bytes) -> None:
        async with self._lock:
            if self.draining:
                return
            fmt = self.config.input_format
            samples = decode_chunk(data, fmt)
            if samples.size == 0:
                return
            self.audio_seconds += samples.size / fmt.rate
            self.metrics.audio_seconds.labels(api=API, mode="streaming").inc(samples.size / fmt.rate)
            out = self._resampler.process(samples)
            start = self._clock
            if self.config.server_vad:
                self._ensure_detector()  # a new detector's time 0 is the clock before this audio
            self._clock += out.size
            if self.config.server_vad:
                await self._feed_vad(out)
            else:
                if self._current is None:
                    self._current = self._open_turn(start)
                self._feed(self._current, out)

    async def _commit(self) -> None:
        async with self._lock:
            if self.config.server_vad:
                self._ensure_detector()  # (see _append)
            tail = self._resampler.flush()
            self._resampler = StreamResampler(self.config.input_format.rate, self.rate)
            self._clock += tail.size
            if self.config.server_vad:
                closed = await self._flush_vad(tail)
            else:
                turn = self._current
                closed = turn is not None
                if turn is not None:
                    self._feed(turn, tail)
                    await self._close_input(turn)
        if not closed:
            raise ProtocolError("the input audio buffer has no speech to commit; append audio first"
                                if self.config.server_vad else
                                "the input audio buffer is empty; append audio before committing",
                                code="input_audio_buffer_commit_empty")

    async def _clear(self) -> None:
        async with self._lock:
            if self._current is not None:
                self._abort(self._current)
            if self._detector is not None:
                self._detector.clear()  # keeps the detector's clock, drops held audio and the turn
            self._vad_item_id = None
        await self.sender.send(ev.cleared())

    def _open_turn(self, start: int) -> Turn:
        try:
            stream = self.service.open_request(None, streaming=True, decoding=self._options)
        except EngineShutdownError as exc:
            raise ProtocolError(f"server is shutting down: {exc}", code="server_shutting_down",
                                error_type=ev.SERVER_ERROR_TYPE) from exc
        except EngineError as exc:
            raise ProtocolError(f"recognition request refused: {exc}", code="engine_error",
                                error_type=ev.SERVER_ERROR_TYPE) from exc
        turn = Turn(item_id=self._vad_item_id or ev.new_id("item"), stream=stream, start=start)
        turn.pump = asyncio.create_task(self._pump(turn), name=f"realtime-pump-{turn.item_id}")
        self._turns.add(turn)
        logger.debug("session %s: turn %s -> request %s at %d ms", self.id, turn.item_id, turn.request_id,
                     samples_ms(start, self.rate))
        return turn

    def _feed(self, turn: Turn, samples: np.ndarray) -> None:
        if samples.size == 0:
            return
        try:
            self.service.feed(turn.request_id, samples)
        except UnknownRequestError:
            return  # the request already finished (an error its pump reports)
        turn.fed += samples.size
        turn.arrivals.append((turn.fed, time.monotonic()))

    async def _close_input(self, turn: Turn) -> None:
        """End the turn's audio (the engine then finalizes it) and announce the committed item."""
        turn.input_closed_at = time.monotonic()
        with contextlib.suppress(UnknownRequestError):  # already finished: its pump reports why
            self.service.feed(turn.request_id, np.zeros(0, dtype=np.float32), is_last=True)
        if self._current is turn:
            self._current = None
        await self.sender.send(ev.committed(turn.item_id, self._previous_item_id))
        self._previous_item_id = turn.item_id
        turn.committed.set()

    # ------------------------------------------------------------------ server VAD

    def _restart_vad(self) -> None:
        self._detector = None
        self._vad_origin = self._clock
        self._vad_item_id = None

    def _ensure_detector(self) -> TurnDetector:
        if self._detector is None:
            assert self._vad is not None  # server_vad is refused without a model
            settings = TurnSettings(threshold=self.vad.threshold, silence_duration_ms=self.vad.silence_duration_ms,
                                    prefix_padding_ms=self.vad.prefix_padding_ms)
            self._detector = self._vad.detector(settings)
            self._vad_origin = self._clock
        return self._detector

    async def _feed_vad(self, samples: np.ndarray) -> None:
        detector = self._ensure_detector()
        assert self._vad is not None
        # scored with every other session's audio in one batched call, off the event loop
        events = await self._vad.feed(detector, samples)
        await self._on_turn_events(events)

    async def _flush_vad(self, tail: np.ndarray) -> bool:
        """Manual commit under server VAD: close the turn in progress. False if there was none."""
        detector = self._ensure_detector()
        events = detector.feed(tail) + detector.flush()
        await self._on_turn_events(events)
        self._restart_vad()  # a flushed detector takes no more audio; the next starts at the clock
        return any(isinstance(e, SpeechStopped) for e in events)

    async def _on_turn_events(self, events: Sequence[TurnEvent]) -> None:
        origin_ms = samples_ms(self._vad_origin, self.rate)
        for event in events:
            if isinstance(event, SpeechStarted):
                self._vad_item_id = ev.new_id("item")
                start = self._vad_origin + event.audio_start_ms * self.rate // 1000
                await self.sender.send(ev.speech_started(self._vad_item_id, origin_ms + event.audio_start_ms,
                                                         origin_ms + event.speech_start_ms))
                try:
                    self._current = self._open_turn(start)
                except ProtocolError as exc:
                    await self.sender.send(exc.event())
            elif isinstance(event, TurnAudio):
                if self._current is not None:  # None: the turn's request was refused or failed
                    self._feed(self._current, event.audio)
            elif isinstance(event, SpeechStopped):
                item_id = self._current.item_id if self._current is not None else self._vad_item_id
                await self.sender.send(ev.speech_stopped(item_id or ev.new_id("item"),
                                                         origin_ms + event.audio_end_ms,
                                                         origin_ms + event.speech_end_ms))
                if self._current is not None:
                    await self._close_input(self._current)
                self._vad_item_id = None

    # ------------------------------------------------------------------ engine outputs

    async def _pump(self, turn: Turn) -> None:
        outcome = "cancelled"
        try:
            while True:
                out = await turn.stream.get()
                if not out.finished:
                    await self._send_partial(turn, out)
                    continue
                if out.finish_reason == "error":
                    turn.answered = True
                    outcome = "shutdown" if out.error_stage == "shutdown" else "error"
                    if self._current is turn:
                        self._current = None  # later audio starts a new item
                    if turn.input_closed_at is not None:
                        await turn.committed.wait()  # its committed event is on its way: keep the order
                    await self.sender.send(ev.transcription_failed(
                        turn.item_id, f"recognition failed at {out.error_stage}: {out.error}",
                        code="server_shutting_down" if outcome == "shutdown" else "recognition_failed",
                        audio_end_ms=samples_ms(turn.start + turn.fed, self.rate), server_ms=self._server_ms(turn)))
                elif out.finish_reason != "abort":
                    await turn.committed.wait()
                    turn.answered = True
                    outcome = "ok"
                    await self._send_completed(turn, out)
                return
        finally:
            self.service.close(turn.request_id)
            self._turns.discard(turn)
            self.metrics.request_duration.labels(api=API, mode="streaming", outcome=outcome).observe(
                time.monotonic() - turn.opened_at)

    async def _send_partial(self, turn: Turn, out: RequestOutput) -> None:
        text = out.text
        if text == turn.sent_text:
            return
        if text.startswith(turn.sent_text):
            delta, full = text[len(turn.sent_text):], None
        else:  # tentative text already sent was revised
            delta, full = "", text
        turn.sent_text = text
        if turn.partials == 0:
            self.metrics.time_to_first_partial.labels(api=API).observe(time.monotonic() - turn.opened_at)
        turn.partials += 1
        covered = min(round(out.duration * self.rate), turn.fed) if out.duration else turn.fed
        await self.sender.send(ev.transcription_delta(
            turn.item_id, delta, text=full, committed_text=out.committed, tentative_text=out.tentative,
            audio_end_ms=samples_ms(turn.start + covered, self.rate), server_ms=elapsed_ms(turn.fed_at(covered))))

    async def _send_completed(self, turn: Turn, out: RequestOutput) -> None:
        await self.sender.send(ev.transcription_completed(
            turn.item_id, out.text, audio_seconds=turn.fed / self.rate, finish_reason=out.finish_reason,
            language=out.language, audio_end_ms=samples_ms(turn.start + turn.fed, self.rate),
            server_ms=self._server_ms(turn)))

    def _server_ms(self, turn: Turn) -> int:
        return elapsed_ms(turn.input_closed_at if turn.input_closed_at is not None else turn.opened_at)
