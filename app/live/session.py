"""The live-turn pump: audio in, turns to the engine, typed events out. Surface-neutral.

    surface ── push(samples) ──►  manual turns: the open turn (opened by the first audio,
      │        end_turn(tail)     ended by end_turn)
      │        clear()            server VAD: TurnDetector over the shared VadBatcher ─► turns
      │                                          │
      │                           Turn = one EngineService streaming request
      │                                          │ one pump task per turn
      └◄── await on_event(event) ◄───────────────┘
           SpeechBegan  TurnOpened | TurnRefused  SpeechEnded  InputClosed        (audio side)
           TurnPartial  TurnFinal | TurnFailed | TurnAborted                      (engine side)

Audio-side events are handed out inside the `push` / `end_turn` call that caused them, in
order; engine-side events come from each turn's pump task, so a surface's handler runs
concurrently for different turns. The session clock is the model-rate audio pushed so far;
silence between server-VAD turns never reaches the engine. `push`, `end_turn`, `clear` and
`detect_turns` are called by one task at a time (the surface's receive loop). The owner calls
`abort_all()` in its `finally`, which aborts every engine request the session still has open.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from app.engine_service import EngineService
from app.live.turn import (
    InputClosed,
    LiveEvent,
    SpeechBegan,
    SpeechEnded,
    Turn,
    TurnAborted,
    TurnFailed,
    TurnFinal,
    TurnOpened,
    TurnPartial,
    TurnRefused,
    samples_ms,
)
from app.live.vad import VadBatcher
from app.output_stream import OutputStream
from engine import DecodingOptions
from engine.errors import EngineError, UnknownRequestError
from engine.vad import SAMPLE_RATE as VAD_SAMPLE_RATE
from engine.vad import SpeechStarted, SpeechStopped, TurnAudio, TurnDetector, TurnEvent, TurnSettings

logger = logging.getLogger(__name__)

EventHandler = Callable[[LiveEvent], Awaitable[None]]


def _new_turn_id() -> str:
    return uuid.uuid4().hex


class LiveSession:
    def __init__(
        self,
        service: EngineService,
        on_event: EventHandler,
        *,
        options: DecodingOptions,
        vad: VadBatcher | None = None,
        turn_detection: TurnSettings | None = None,
        new_turn_id: Callable[[], str] = _new_turn_id,
        on_turn_done: Callable[[Turn], None] | None = None,
        label: str = "live",
    ) -> None:
        """`vad`: the server's batcher (None without a VAD model); `turn_detection`: cut turns with
        it (None: the surface ends turns). `on_turn_done` runs when a turn's pump ends, also when
        it was cancelled (so it must not await); `turn.outcome` says how."""
        self.service = service
        self.rate: int = service.sample_rate
        self.options = options
        """Decoding options of the turns opened from now on."""
        self._on_event = on_event
        self._on_turn_done = on_turn_done
        self._new_turn_id = new_turn_id
        self.label = label
        # Server VAD scores 16 kHz audio; offered only when the model runs at that rate too.
        self._vad = vad if self.rate == VAD_SAMPLE_RATE else None
        self.clock = 0
        """Model-rate samples pushed so far (the session's audio time)."""
        self.current: Turn | None = None
        """The turn that takes the audio now."""
        self.turns: set[Turn] = set()
        """Turns whose engine request is still open."""
        self.stopped = False
        self._settings: TurnSettings | None = None
        self._detector: TurnDetector | None = None
        self._origin = 0
        """Session clock where the current detector started (its times are relative to it)."""
        self._speech_id: str | None = None
        """Id of the server-VAD turn in progress (also when its request was refused or failed)."""
        self.detect_turns(turn_detection)

    # ------------------------------------------------------------------ state

    @property
    def vad_available(self) -> bool:
        """Server VAD can cut turns (a VAD model is loaded and the engine runs at its rate)."""
        return self._vad is not None

    @property
    def server_vad(self) -> bool:
        return self._settings is not None

    @property
    def busy(self) -> bool:
        """A turn whose input has ended is still being transcribed (its result is still to come).
        An open turn does not count: a client that stops sending mid-turn is idle."""
        return any(t.closed.is_set() for t in self.turns)

    def detect_turns(self, settings: TurnSettings | None) -> None:
        """Cut turns with the server VAD (`settings`) or leave them to the surface (None). Turn
        detection restarts at the clock; change it only while no turn is open."""
        if settings is not None and self._vad is None:
            raise ValueError("server VAD is not available (no VAD model, or the model rate is not 16 kHz)")
        self._settings = settings
        self._detector = None
        self._origin = self.clock
        self._speech_id = None

    def tune_turn_end(self, silence_duration_ms: int) -> None:
        """Server VAD: the silence that ends the turn in progress and later ones, without
        restarting detection (a surface deciding the end of a turn from what was said)."""
        if self._settings is None:
            return
        self._settings = dataclasses.replace(self._settings, silence_duration_ms=silence_duration_ms)
        if self._detector is not None:
            self._detector.retune(silence_duration_ms)

    def stop(self) -> None:
        """Take no more audio: later `push` / `end_turn` calls, and the events left in the call
        that is handing one out, are ignored. Open turns still run to their result."""
        self.stopped = True

    # ------------------------------------------------------------------ audio

    async def push(self, samples: np.ndarray) -> None:
        """Audio (float32 mono at the model rate). With manual turns it goes to the open turn,
        opening one (also for an empty push, so a client's first bytes start a turn); an engine
        refusal is raised here (EngineError)."""
        if self.stopped:
            return
        start = self.clock
        if self._settings is not None:
            detector = self._ensure_detector()  # a new detector's time 0 is the clock before this audio
            self.clock += samples.size
            if samples.size:
                # scored with every other session's audio in one batched call, off the event loop
                assert self._vad is not None
                await self._handle(await self._vad.feed(detector, samples))
            return
        self.clock += samples.size
        if self.current is None:
            self.current = await self._start(self._request(), start, None)
        self._feed(self.current, samples)

    async def end_turn(self, tail: np.ndarray | None = None) -> bool:
        """End the turn in progress after `tail` (the resampler's last samples): with manual turns
        the open one, with server VAD the speech in progress (then detection restarts at the
        clock). False when there was no turn to end (then a manual tail opens no turn)."""
        if self.stopped:
            return False
        tail = np.zeros(0, dtype=np.float32) if tail is None else tail
        if self._settings is not None:
            detector = self._ensure_detector()
            self.clock += tail.size
            events = detector.feed(tail) + detector.flush()
            await self._handle(events)
            self.detect_turns(self._settings)  # a flushed detector takes no more audio
            return any(isinstance(e, SpeechStopped) for e in events)
        self.clock += tail.size
        turn = self.current
        if turn is None:  # nothing pushed since the last turn ended (or it failed): nothing to end
            return False
        self._feed(turn, tail)
        await self._close_input(turn)
        return True

    def clear(self) -> bool:
        """Drop the turn in progress (its engine request is aborted, no more events for it) and any
        audio the detector holds, keeping the clock. True when a running turn was cancelled."""
        cancelled = self.abort(self.current) if self.current is not None else False
        if self._detector is not None:
            self._detector.clear()
        self._speech_id = None
        return cancelled

    # ------------------------------------------------------------------ turns

    def _request(self) -> OutputStream:
        """A new engine streaming request (EngineError when the engine refuses it)."""
        return self.service.open_request(None, streaming=True, decoding=self.options)

    async def _start(self, stream: OutputStream, start: int, turn_id: str | None) -> Turn:
        """A turn over an open request: announced, then its pump started."""
        turn = Turn(id=turn_id or self._new_turn_id(), stream=stream, start=start)
        self.turns.add(turn)
        logger.debug("%s: turn %s -> request %s at %d ms", self.label, turn.id, turn.request_id,
                     samples_ms(start, self.rate))
        try:
            await self._on_event(TurnOpened(turn))
        finally:  # started after TurnOpened is handled, so a turn's outputs never come before it
            turn.pump = asyncio.create_task(self._pump(turn), name=f"live-pump-{turn.id}")
        return turn

    def _feed(self, turn: Turn, samples: np.ndarray) -> None:
        if samples.size == 0 or turn.finished:
            return
        try:
            self.service.feed(turn.request_id, samples)
        except UnknownRequestError:
            # the engine already finished the turn (an error its pump reports, or a cache ceiling)
            logger.debug("%s: turn %s ended by the engine; dropping %d samples", self.label, turn.id, samples.size)
            return
        turn.fed += samples.size
        turn.arrivals.append((turn.fed, time.monotonic()))

    async def _close_input(self, turn: Turn) -> None:
        """End the turn's audio (the engine then finalizes it) and hand out `InputClosed`."""
        turn.input_closed_at = time.monotonic()
        if not turn.finished:
            with contextlib.suppress(UnknownRequestError):  # already finished: its pump reports why
                self.service.feed(turn.request_id, np.zeros(0, dtype=np.float32), is_last=True)
        if self.current is turn:
            self.current = None
        try:
            await self._on_event(InputClosed(turn))
        finally:
            turn.closed.set()

    def abort(self, turn: Turn) -> bool:
        """Abort one turn's engine request; no more events for it. True when its pump was still
        running (the request was cancelled mid-flight)."""
        pump = turn.pump
        running = pump is not None and not pump.done()
        if pump is not None and running:
            pump.cancel()
        self.service.close(turn.request_id)
        self.turns.discard(turn)
        if self.current is turn:
            self.current = None
        return running

    def abort_all(self) -> int:
        """Abort every engine request of the session (disconnect, shutdown). Idempotent. Returns
        how many turns were cancelled mid-flight."""
        cancelled = sum(self.abort(turn) for turn in list(self.turns))
        self.current = None
        return cancelled

    async def wait_done(self) -> None:
        """Wait until every turn's pump has ended (after `end_turn`: its result was handed out)."""
        pumps = [t.pump for t in self.turns if t.pump is not None]
        await asyncio.gather(*pumps, return_exceptions=True)

    # ------------------------------------------------------------------ server VAD

    def _ensure_detector(self) -> TurnDetector:
        if self._detector is None:
            assert self._vad is not None and self._settings is not None  # detect_turns checked
            self._detector = self._vad.detector(self._settings)
            self._origin = self.clock
        return self._detector

    async def _handle(self, events: Sequence[TurnEvent]) -> None:
        origin_ms = samples_ms(self._origin, self.rate)
        for event in events:
            if self.stopped:
                return
            if isinstance(event, SpeechStarted):
                self._speech_id = turn_id = self._new_turn_id()
                start = self._origin + event.audio_start_ms * self.rate // 1000
                await self._on_event(SpeechBegan(turn_id, origin_ms + event.audio_start_ms,
                                                 origin_ms + event.speech_start_ms))
                try:
                    stream = self._request()
                except EngineError as exc:
                    await self._on_event(TurnRefused(turn_id, exc))
                    continue
                self.current = await self._start(stream, start, turn_id)
            elif isinstance(event, TurnAudio):
                if self.current is not None:  # None: the turn's request was refused or failed
                    self._feed(self.current, event.audio)
            elif isinstance(event, SpeechStopped):
                ended = self.current.id if self.current is not None else self._speech_id
                await self._on_event(SpeechEnded(ended or self._new_turn_id(), origin_ms + event.audio_end_ms,
                                                 origin_ms + event.speech_end_ms))
                if self.current is not None:
                    await self._close_input(self.current)
                self._speech_id = None

    # ------------------------------------------------------------------ engine outputs

    async def _pump(self, turn: Turn) -> None:
        try:
            while True:
                out = await turn.stream.get()
                if not out.finished:
                    if out.text == turn.text:
                        continue
                    previous, turn.text = turn.text, out.text
                    turn.partials += 1
                    await self._on_event(TurnPartial(turn, out, previous))
                    continue
                turn.finished = True
                if out.finish_reason == "error":
                    turn.outcome = "shutdown" if out.error_stage == "shutdown" else "error"
                    if self.current is turn:
                        self.current = None  # later audio starts a new turn
                    await self._on_event(TurnFailed(turn, out))
                elif out.finish_reason == "abort":
                    await self._on_event(TurnAborted(turn, out))
                else:
                    turn.outcome = "ok"
                    await self._on_event(TurnFinal(turn, out))
                return
        except Exception:  # a surface's bug costs its turn, never the session
            logger.exception("%s: turn %s: handling its output failed", self.label, turn.id)
            if self.current is turn:
                self.current = None  # its request is closed below: later audio starts a new turn
        finally:
            self.service.close(turn.request_id)
            self.turns.discard(turn)
            if self._on_turn_done is not None:
                self._on_turn_done(turn)
