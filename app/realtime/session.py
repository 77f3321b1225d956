"""One realtime transcription session: client events in, the live core's turn events out.

    audio ─► decode ─► InputPipeline (resample to the model rate, noise reduction) ─► LiveSession
             (app/live): manual commits, or server / semantic VAD, cut turns
    turn = one engine streaming request = one item; its events render as `speech_started` /
    `speech_stopped` / `committed` + `conversation.item.added`, `delta`s, and exactly one
    `completed` (or `failed`) + `conversation.item.done` after the item's `committed`.

The session clock is the resampled audio received so far (model-rate samples), so every
`*_ms` field is audio time from the start of the session. A session may outlive its WebSocket
(resumable sessions, app/routes/realtime.py): its events go through `EventSender`, which logs
them for a reconnecting client. The owner calls `abort_all()` when the session ends, which
aborts every engine request it still has open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from fractions import Fraction
from typing import Any

from starlette.websockets import WebSocket

from app.admission import Permit, Refused
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
from app.live.sender import EventSender
from app.model_pool import ModelPool
from app.realtime import events as ev
from app.realtime.audio_input import InputPipeline, decode_base64, decode_chunk
from app.realtime.config import SessionConfig, VadSettings
from app.realtime.deltas import AppendOnlyDeltas, tokens_within
from app.realtime.events import ProtocolError
from app.realtime.options import decoding_options
from app.realtime.semantic import base_silence_ms, silence_for
from app.realtime.update import parse_beta_update, parse_ga_update
from app.requests import ModelNotFound, build_options
from engine import RequestOutput
from engine.errors import EngineError, EngineShutdownError
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
        session_id: str | None = None,
        config: SessionConfig | None = None,
        models: ModelPool | None = None,
        permit: Permit | None = None,
    ) -> None:
        """`config`: the session's starting configuration (a client secret's); by default server
        VAD when the server has it. `models`: the server's models, which a session.update naming
        another model switches the session to (`service` is the one `config` names, with the
        caller's permit); without it the session stays on `service`."""
        self.id = session_id or ev.new_id("sess")
        self.sender = sender
        self.service = service
        self.permit = permit
        """The session's admission on `service` (released when it ends; None: held by the caller)."""
        self.metrics = service.metrics
        self.rate: int = service.sample_rate
        self.vad = vad
        self._served_model_name = None if models is not None else served_model_name  # the pool checks names
        self._models = models
        self.beta = beta
        self.live = LiveSession(service, self._on_event, options=build_options(), vad=vad_batcher,
                                new_turn_id=lambda: ev.new_id("item"), on_turn_done=self._turn_done,
                                label=f"session {self.id}")
        default = SessionConfig(turn_detection=vad.detection() if self.live.vad_available else None)
        self.config = default
        self._pipeline = InputPipeline(default.input_format, self.rate, None)
        if config is not None:  # checked when the secret was minted; applied as an update would be
            self._apply(config)
        self.live.detect_turns(self._turn_settings(self.config))
        self._previous_item_id: str | None = None
        self._answered: set[Turn] = set()
        """Turns whose terminal event (completed / failed) is out, or on its way."""
        self._sent_tokens: dict[str, int] = {}
        """Per open item: how many of its leading tokens' log-probabilities went out with its deltas."""
        self._deltas = AppendOnlyDeltas()
        self._lock = asyncio.Lock()
        self.input_lock = asyncio.Lock()
        """Held while one client message is handled, and while a resumed connection takes over, so
        no message of the connection it replaces lands after `audio_end_ms` was counted."""
        self.commits_received = 0
        """`input_audio_buffer.commit` events taken (a resumed client re-sends the ones after them)."""
        self.draining = False
        self.started = time.monotonic()
        self.audio_seconds = 0.0
        self.received = Fraction(0)
        """Client audio received so far, in seconds (exact: what a resumed client continues from)."""
        self._skip = 0
        """Samples of the next audio a resumed client re-sends that the session already has."""
        self._in_speech = False
        self._idle_from_ms = 0
        """Session audio time (ms) since when no speech was heard (for `idle_timeout_ms`)."""

    # ------------------------------------------------------------------ lifecycle

    @property
    def busy(self) -> bool:
        """A committed turn is still being transcribed (its events are still to come). An open,
        uncommitted turn does not count: a client that stops sending mid-turn is idle."""
        return self.live.busy

    @property
    def audio_end_ms(self) -> int:
        """Client audio the session holds, in ms (whole: a resumed client re-sends from here)."""
        return math.floor(self.received * 1000)

    def render(self, beta: bool) -> dict[str, Any]:
        return self.config.render(self.id, beta)

    async def start(self, resume: dict[str, Any] | None = None) -> None:
        """`session.created`; `resume` (token, grace) is the OASR extension for reconnecting."""
        name = "transcription_session.created" if self.beta else "session.created"
        event = ev.server_event(name, session=self.render(self.beta))
        if resume is not None:
            event["resume"] = resume
        await self.sender.send(event)

    async def reattach(self, websocket: WebSocket, after: str, resume: dict[str, Any]) -> WebSocket | None:
        """A client resumed: `session.resumed` (with `audio_end_ms`, where its audio goes on) and
        every event after `after` go to `websocket`. Returns the connection it replaces, if any.
        Under the input lock, so no message arrives between counting the audio and the greeting."""
        async with self.input_lock:
            rate = self.config.input_format.rate
            # the client re-sends from sample floor(audio_end_ms x rate / 1000): what the session
            # already has past it is skipped
            self._skip = round(self.received * rate) - math.floor(Fraction(self.audio_end_ms * rate, 1000))

            def greeting(replayed: int) -> dict[str, Any]:
                return ev.server_event("session.resumed", session=self.render(self.beta),
                                       audio_end_ms=self.audio_end_ms, commits_received=self.commits_received,
                                       replayed=replayed, resume=resume)

            return await self.sender.attach(websocket, after, greeting)

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
        self.service.series.requests_cancelled.inc(self.live.abort_all())

    def _turn_done(self, turn: Turn) -> None:
        self._answered.discard(turn)
        self._sent_tokens.pop(turn.id, None)
        self._deltas.forget(turn.id)
        outcome = "error" if turn.outcome == "shutdown" else turn.outcome  # draining is the server's problem
        self.metrics.request_duration.labels(api=API, mode="streaming", outcome=outcome).observe(
            time.monotonic() - turn.opened_at)
        self.metrics.request_audio_seconds.labels(api=API, mode="streaming").observe(turn.fed / self.rate)

    def _turn_settings(self, config: SessionConfig) -> TurnSettings | None:
        td = config.turn_detection
        if td is None:
            return None
        silence = base_silence_ms(td.eagerness) if td.type == "semantic_vad" else td.silence_duration_ms
        return TurnSettings(threshold=td.threshold, silence_duration_ms=silence, prefix_padding_ms=td.prefix_padding_ms)

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
            self.commits_received += 1
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
            service, permit = await self._service_for(config)
            try:
                await self._update_on(service, config)
            except BaseException:
                if permit is not None:
                    permit.release()  # the permit taken for a switch that did not happen
                raise
            if permit is not None:
                self._switch(service, permit)
        name = "transcription_session.updated" if beta else "session.updated"
        await self.sender.send(ev.server_event(name, session=self.render(beta)))

    async def _service_for(self, config: SessionConfig) -> tuple[EngineService, Permit | None]:
        """The service of the model `config` names: this session's (no permit), or another one's
        with a permit taken on it (the session moves there once the update is accepted)."""
        param = "session.input_audio_transcription" if self.beta else "session.audio.input.transcription"
        if self._models is None:
            return self.service, None
        try:
            service = await self._models.service_for(config.transcription.model or None)
        except ModelNotFound as exc:
            raise ProtocolError(str(exc), code="model_not_found", param=f"{param}.model") from exc
        except EngineError as exc:
            raise refused(exc) from exc
        if service is self.service:
            return service, None
        if self.live.turns:
            raise ProtocolError("the model cannot change while a turn is open or being transcribed; wait for its "
                                "transcription (or clear the input audio buffer) first",
                                code="session_update_with_buffered_audio", param=f"{param}.model")
        if service.sample_rate != self.rate:
            raise ProtocolError(f"model {config.transcription.model!r} takes {service.sample_rate} Hz audio, "
                                f"this session's model {self.rate} Hz; open a new session for it",
                                code="unsupported_value", param=f"{param}.model")
        try:
            return service, await service.admission.take_live()
        except Refused as exc:
            raise ProtocolError(f"model {config.transcription.model!r}: {exc.message}", code="server_busy",
                                error_type=ev.SERVER_ERROR_TYPE) from exc

    def _switch(self, service: EngineService, permit: Permit) -> None:
        """Move the session (no turn open) to `service`, on `permit`."""
        old, self.permit = self.permit, permit
        self.service = service
        self.live.service = service
        self.metrics = service.metrics
        if old is not None:
            old.release()

    async def _update_on(self, service: EngineService, config: SessionConfig) -> None:
        """Validate and take `config` on `service` (under the session lock)."""
        old = self.config
        audio_changed = (config.input_format, config.turn_detection, config.noise_reduction) != (
            old.input_format, old.turn_detection, old.noise_reduction)
        if audio_changed and self.live.current is not None:
            raise ProtocolError("the audio format, noise reduction and turn detection cannot change while a "
                                "turn is open; commit or clear the input audio buffer first",
                                code="session_update_with_buffered_audio", param="session")
        if config.server_vad and not self.live.vad_available:
            raise ProtocolError("server VAD is not available on this server; use turn_detection null and "
                                "commit turns yourself", code="server_vad_unavailable",
                                param="session.turn_detection")
        pipeline = self._pipeline
        self._apply(config, service)
        if audio_changed:
            held = pipeline.flush()
            if held.size and old.server_vad:
                await self.live.push(held)  # silence the old detector was still to hear
            self.live.detect_turns(self._turn_settings(config))

    def _apply(self, config: SessionConfig, service: EngineService | None = None) -> None:
        """Take `config` (validated whole first, against `service`'s model: a refused update
        changes nothing)."""
        param = "session.input_audio_transcription" if self.beta else "session.audio.input.transcription"
        options = decoding_options(config.transcription, logprobs=config.logprobs, engine=service or self.service,
                                   served_model_name=self._served_model_name, param=param)
        if (config.input_format, config.noise_reduction) != (self.config.input_format, self.config.noise_reduction):
            self._pipeline = InputPipeline(config.input_format, self.rate, config.noise_reduction)
        self.live.options = options
        self.config = config

    # ------------------------------------------------------------------ audio

    async def _append(self, data: bytes) -> None:
        async with self._lock:
            if self.draining:
                return
            fmt = self.config.input_format
            samples = decode_chunk(data, fmt)
            if self._skip:  # a resumed client re-sends from a whole millisecond the session already has
                dropped = min(self._skip, samples.size)
                samples, self._skip = samples[dropped:], self._skip - dropped
            if samples.size == 0:
                return
            self.received += Fraction(samples.size, fmt.rate)
            self.audio_seconds += samples.size / fmt.rate
            self.metrics.audio_seconds.labels(api=API, mode="streaming").inc(samples.size / fmt.rate)
            try:
                await self.live.push(self._pipeline.process(samples))
            except EngineError as exc:  # manual turns: the new turn's request was refused
                raise refused(exc) from exc
            await self._check_idle()

    async def _commit(self) -> None:
        async with self._lock:
            closed = await self.live.end_turn(self._pipeline.flush())
        if not closed:
            raise ProtocolError("the input audio buffer has no speech to commit; append audio first"
                                if self.config.server_vad else
                                "the input audio buffer is empty; append audio before committing",
                                code="input_audio_buffer_commit_empty")

    async def _clear(self) -> None:
        async with self._lock:
            if self.live.clear():
                self.service.series.requests_cancelled.inc()
        await self.sender.send(ev.cleared())

    async def _check_idle(self) -> None:
        """server_vad `idle_timeout_ms`: that much audio without speech commits an empty item."""
        td = self.config.turn_detection
        if td is None or td.idle_timeout_ms is None or self._in_speech:
            return
        now = samples_ms(self.live.clock, self.rate)
        if now - self._idle_from_ms < td.idle_timeout_ms:
            return
        item = ev.new_id("item")
        await self.sender.send(ev.timeout_triggered(item, self._idle_from_ms, now))
        await self._send_committed(item)
        await self.sender.send(ev.transcription_completed(
            item, "", audio_seconds=(now - self._idle_from_ms) / 1000, finish_reason=None, language=None,
            audio_end_ms=now, server_ms=0, logprobs=[] if self.config.logprobs else None))
        if not self.beta:
            await self.sender.send(ev.item_done(item, ""))
        self._idle_from_ms = now

    # ------------------------------------------------------------------ turn events

    async def _send_committed(self, item_id: str) -> None:
        previous, self._previous_item_id = self._previous_item_id, item_id
        await self.sender.send(ev.committed(item_id, previous))
        await self.sender.send(ev.item_added(item_id, previous, beta=self.beta))

    async def _on_event(self, event: LiveEvent) -> None:
        if isinstance(event, SpeechBegan):
            self._in_speech = True
            td = self.config.turn_detection
            if td is not None and td.type == "semantic_vad":
                self.live.tune_turn_end(base_silence_ms(td.eagerness))
            await self.sender.send(ev.speech_started(event.turn_id, event.audio_start_ms, event.speech_start_ms))
        elif isinstance(event, TurnRefused):
            await self.sender.send(refused(event.error).event())
        elif isinstance(event, SpeechEnded):
            self._in_speech = False
            self._idle_from_ms = event.audio_end_ms
            await self.sender.send(ev.speech_stopped(event.turn_id, event.audio_end_ms, event.speech_end_ms))
        elif isinstance(event, InputClosed):
            await self._send_committed(event.turn.id)
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
            if not self.beta and turn.input_closed_at is not None:
                await self.sender.send(ev.item_done(turn.id, None))
        elif isinstance(event, TurnFinal):
            turn, out = event.turn, event.output
            await turn.closed.wait()  # `completed` comes after the item's `committed`
            self._answered.add(turn)
            rest = self._deltas.final(turn.id, out.text)
            if rest:  # the item's deltas join to its transcript, as OpenAI's clients expect
                await self.sender.send(ev.transcription_delta(
                    turn.id, rest, committed_text=out.text, tentative_text="" if self.config.tentative else None,
                    audio_end_ms=samples_ms(turn.start + turn.fed, self.rate), server_ms=self._server_ms(turn),
                    logprobs=self._logprobs(out, self._sent_tokens.get(turn.id, 0))))
            await self.sender.send(ev.transcription_completed(
                turn.id, out.text, audio_seconds=turn.fed / self.rate, finish_reason=out.finish_reason,
                language=out.language, audio_end_ms=samples_ms(turn.start + turn.fed, self.rate),
                server_ms=self._server_ms(turn), logprobs=self._logprobs(out, 0)))
            if not self.beta:
                await self.sender.send(ev.item_done(turn.id, out.text))
        # TurnOpened needs no event; TurnAborted is the session's own abort, whose client has left

    async def _send_partial(self, event: TurnPartial) -> None:
        turn, out = event.turn, event.output
        text = out.text
        delta = self._deltas.partial(turn.id, out.committed)
        if turn.partials == 1:
            self.metrics.time_to_first_partial.labels(api=API).observe(time.monotonic() - turn.opened_at)
        td = self.config.turn_detection
        if td is not None and td.type == "semantic_vad" and turn is self.live.current:
            self.live.tune_turn_end(silence_for(text, td.eagerness))
        if not self.config.interim or (not delta and not self.config.tentative):
            return  # nothing new that will not change (tentative text: only for sessions that include it)
        logprobs = None
        if self.config.logprobs:  # the tokens of the text this delta appended
            start = self._sent_tokens.get(turn.id, 0)
            end = max(start, tokens_within(out.token_bytes or [], self._deltas.sent(turn.id)))
            logprobs = self._logprobs(out, start, end)
            self._sent_tokens[turn.id] = end
        covered = turn.covered(out, self.rate)
        await self.sender.send(ev.transcription_delta(
            turn.id, delta, committed_text=out.committed, tentative_text=out.tentative if self.config.tentative else None,
            audio_end_ms=samples_ms(turn.start + covered, self.rate), server_ms=elapsed_ms(turn.fed_at(covered)),
            logprobs=logprobs))

    def _logprobs(self, out: RequestOutput, start: int, end: int | None = None) -> list[dict[str, Any]] | None:
        """Log-probabilities of the output's tokens [start, end) (an empty list when the model
        reports none); None unless the session includes them."""
        if not self.config.logprobs:
            return None
        if out.token_logprobs is None or out.token_bytes is None:
            return []
        return ev.logprob_entries(out.token_bytes[start:end], out.token_logprobs[start:end])

    def _server_ms(self, turn: Turn) -> int:
        return elapsed_ms(turn.input_closed_at if turn.input_closed_at is not None else turn.opened_at)

