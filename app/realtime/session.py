"""One realtime transcription session: client events in, the live core's turn events out.

    audio ─► decode ─► StreamResampler (→ model rate) ─► LiveSession (app/live): manual commits
                                                         or server VAD cut turns
    turn = one engine streaming request = one item; its events render as `speech_started` /
    `speech_stopped` / `committed`, `delta`s, and exactly one `completed` (or `failed`) after
    the item's `committed`.

The session clock is the resampled audio received so far (model-rate samples), so every
`*_ms` field is audio time from the start of the session. The owner (the WebSocket route)
calls `abort_all()` in its `finally`, which aborts every engine request the session still has open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from app.audio import StreamResampler
from app.engine_service import EngineService
from app.live import (
    InputClosed,
    LiveEvent,
    LiveSession,
    SpeechBegan,
    SpeechEnded,
    Turn,
    TurnFailed,
    TurnFinal,
    TurnPartial,
    TurnRefused,
    VadBatcher,
    elapsed_ms,
    samples_ms,
)
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
from engine import DecodingOptions
from engine.errors import EngineError, EngineShutdownError, InvalidRequestError
from engine.vad import TurnSettings

logger = logging.getLogger(__name__)

API = "realtime"

CLIENT_EVENTS = ("session.update", "transcription_session.update", "input_audio_buffer.append",
                 "input_audio_buffer.commit", "input_audio_buffer.clear")
# Client events of OpenAI's conversation sessions: known, but meaningless for transcription.
CONVERSATION_EVENTS = frozenset({
    "conversation.item.create", "conversation.item.retrieve", "conversation.item.truncate",
    "conversation.item.delete", "response.create", "response.cancel", "output_audio_buffer.clear",
})


def refused(exc: EngineError) -> ProtocolError:
    """The error event for a turn whose engine request was refused."""
    if isinstance(exc, EngineShutdownError):
        return ProtocolError(f"server is shutting down: {exc}", code="server_shutting_down",
                             error_type=ev.SERVER_ERROR_TYPE)
    return ProtocolError(f"recognition request refused: {exc}", code="engine_error", error_type=ev.SERVER_ERROR_TYPE)


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
        self._served_model_name = served_model_name
        self.beta = beta
        self.live = LiveSession(service, self._on_event, options=DecodingOptions(task="transcribe"), vad=vad_batcher,
                                new_turn_id=lambda: ev.new_id("item"), on_turn_done=self._turn_done,
                                label=f"session {self.id}")
        self.config = SessionConfig(server_vad=self.live.vad_available)
        self.live.detect_turns(self._turn_settings(self.config))
        self._resampler = StreamResampler(self.config.input_format.rate, self.rate)
        self._previous_item_id: str | None = None
        self._answered: set[Turn] = set()
        """Turns whose terminal event (completed / failed) is out, or on its way."""
        self._lock = asyncio.Lock()
        self.draining = False
        self.started = time.monotonic()
        self.audio_seconds = 0.0

    # ------------------------------------------------------------------ lifecycle

    @property
    def busy(self) -> bool:
        """A committed turn is still being transcribed (its events are still to come). An open,
        uncommitted turn does not count: a client that stops sending mid-turn is idle."""
        return self.live.busy

    def render(self, beta: bool) -> dict[str, Any]:
        return self.config.render_beta(self.id, self.vad) if beta else self.config.render_ga(self.id, self.vad)

    async def start(self) -> None:
        name = "transcription_session.created" if self.beta else "session.created"
        await self.sender.send(ev.server_event(name, session=self.render(self.beta)))

    async def drain(self) -> None:
        """Server shutdown: fail the committed items still being transcribed, close with 1001."""
        self.draining = True
        pending = [t for t in self.live.turns if t.closed.is_set() and t not in self._answered]
        self.abort_all()
        for turn in pending:
            await self.sender.send(ev.transcription_failed(
                turn.id, "server is shutting down", code="server_shutting_down",
                audio_end_ms=samples_ms(turn.start + turn.fed, self.rate), server_ms=0))
        await self.sender.close(1001, "server is shutting down")

    def abort_all(self) -> None:
        """Abort every engine request of the session (disconnect, shutdown). Idempotent."""
        self.metrics.requests_cancelled.inc(self.live.abort_all())

    def _turn_done(self, turn: Turn) -> None:
        self._answered.discard(turn)
        self.metrics.request_duration.labels(api=API, mode="streaming", outcome=turn.outcome).observe(
            time.monotonic() - turn.opened_at)

    def _turn_settings(self, config: SessionConfig) -> TurnSettings | None:
        if not config.server_vad:
            return None
        return TurnSettings(threshold=self.vad.threshold, silence_duration_ms=self.vad.silence_duration_ms,
                            prefix_padding_ms=self.vad.prefix_padding_ms)

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
            if audio_changed and self.live.current is not None:
                raise ProtocolError("the audio format and turn detection cannot change while a turn is open; "
                                    "commit or clear the input audio buffer first",
                                    code="session_update_with_buffered_audio", param="session")
            if config.server_vad and not self.live.vad_available:
                raise ProtocolError("server VAD is not available on this server; use turn_detection null and "
                                    "commit turns yourself", code="server_vad_unavailable",
                                    param="session.turn_detection")
            self.live.options = self._decoding_options(config.transcription, beta)
            if config.input_format != old.input_format:
                self._resampler = StreamResampler(config.input_format.rate, self.rate)
            if audio_changed:
                self.live.detect_turns(self._turn_settings(config))
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
            try:
                await self.live.push(self._resampler.process(samples))
            except EngineError as exc:  # manual turns: the new turn's request was refused
                raise refused(exc) from exc

    async def _commit(self) -> None:
        async with self._lock:
            tail = self._resampler.flush()
            self._resampler = StreamResampler(self.config.input_format.rate, self.rate)
            closed = await self.live.end_turn(tail)
        if not closed:
            raise ProtocolError("the input audio buffer has no speech to commit; append audio first"
                                if self.config.server_vad else
                                "the input audio buffer is empty; append audio before committing",
                                code="input_audio_buffer_commit_empty")

    async def _clear(self) -> None:
        async with self._lock:
            if self.live.clear():
                self.metrics.requests_cancelled.inc()
        await self.sender.send(ev.cleared())

    # ------------------------------------------------------------------ turn events

    async def _on_event(self, event: LiveEvent) -> None:
        if isinstance(event, SpeechBegan):
            await self.sender.send(ev.speech_started(event.turn_id, event.audio_start_ms, event.speech_start_ms))
        elif isinstance(event, TurnRefused):
            await self.sender.send(refused(event.error).event())
        elif isinstance(event, SpeechEnded):
            await self.sender.send(ev.speech_stopped(event.turn_id, event.audio_end_ms, event.speech_end_ms))
        elif isinstance(event, InputClosed):
            await self.sender.send(ev.committed(event.turn.id, self._previous_item_id))
            self._previous_item_id = event.turn.id
        elif isinstance(event, TurnPartial):
            await self._send_partial(event)
        elif isinstance(event, TurnFailed):
            turn, out = event.turn, event.output
            self._answered.add(turn)
            if turn.input_closed_at is not None:
                await turn.closed.wait()  # its committed event is on its way: keep the order
            await self.sender.send(ev.transcription_failed(
                turn.id, f"recognition failed at {out.error_stage}: {out.error}",
                code="server_shutting_down" if event.shutdown else "recognition_failed",
                audio_end_ms=samples_ms(turn.start + turn.fed, self.rate), server_ms=self._server_ms(turn)))
        elif isinstance(event, TurnFinal):
            turn, out = event.turn, event.output
            await turn.closed.wait()  # `completed` comes after the item's `committed`
            self._answered.add(turn)
            await self.sender.send(ev.transcription_completed(
                turn.id, out.text, audio_seconds=turn.fed / self.rate, finish_reason=out.finish_reason,
                language=out.language, audio_end_ms=samples_ms(turn.start + turn.fed, self.rate),
                server_ms=self._server_ms(turn)))
        # TurnOpened needs no event; TurnAborted is the session's own abort, whose client has left

    async def _send_partial(self, event: TurnPartial) -> None:
        turn, out, sent = event.turn, event.output, event.previous_text
        text = out.text
        if text.startswith(sent):
            delta, full = text[len(sent):], None
        else:  # tentative text already sent was revised
            delta, full = "", text
        if turn.partials == 1:
            self.metrics.time_to_first_partial.labels(api=API).observe(time.monotonic() - turn.opened_at)
        covered = turn.covered(out, self.rate)
        await self.sender.send(ev.transcription_delta(
            turn.id, delta, text=full, committed_text=out.committed, tentative_text=out.tentative,
            audio_end_ms=samples_ms(turn.start + covered, self.rate), server_ms=elapsed_ms(turn.fed_at(covered))))

    def _server_ms(self, turn: Turn) -> int:
        return elapsed_ms(turn.input_closed_at if turn.input_closed_at is not None else turn.opened_at)
