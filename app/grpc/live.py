"""One live StreamingRecognize call: headerless chunks -> the live core's turns -> interim and
final results.

    reader task:  audio_content -> PcmChunker (frames, one resampler) -> LiveSession (app/live)
    turn events:  voice events and turns into `items`; each turn's results into its own queue
    the RPC:      yields `items` in order: voice events and turns, each turn until its final

Utterances: with `single_utterance` or `enable_voice_activity_events` the server VAD
(engine.vad.TurnDetector, --vad*) cuts the stream into turns, one engine request and one
final result each, and audio between turns is not recognized; otherwise the whole stream is
one utterance whose final result comes after half-close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from app.engine_service import EngineService
from app.google.convert import AudioSpec, alternatives, billed, duration, result_language
from app.google.wire import google_request_id
from app.grpc.audio import PcmChunker
from app.grpc.convert import RpcError, invalid
from app.live import (
    LiveEvent,
    LiveSession,
    SpeechBegan,
    SpeechEnded,
    Turn,
    TurnAborted,
    TurnFailed,
    TurnFinal,
    TurnOpened,
    TurnPartial,
    TurnRefused,
    VadModelCache,
)
from app.settings import Settings
from engine import DecodingOptions, RequestOutput
from engine.vad import SAMPLE_RATE as VAD_SAMPLE_RATE
from engine.vad import TurnSettings
from protos.oasr.speech.v1 import speech_pb2 as pb

logger = logging.getLogger(__name__)

API = "grpc_streaming"
Event = pb.StreamingRecognizeResponse.SpeechEventType


class _Done:
    """End marker of a queue."""


DONE = _Done()


async def until_done(queue: asyncio.Queue[Any]) -> AsyncIterator[Any]:
    """A queue's items up to its DONE marker; an exception in it is raised where it stands."""
    while True:
        item = await queue.get()
        if item is DONE:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


@dataclass(eq=False)
class _TurnResults:
    """One utterance's responses, in order, until its final."""

    turn: Turn
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    last_text: str | None = None


class LiveCall:
    def __init__(
        self,
        service: EngineService,
        settings: Settings,
        streaming_config: pb.StreamingRecognitionConfig,
        spec: AudioSpec,
        options: DecodingOptions,
        request_id: str,
        vad_models: VadModelCache,
    ):
        if not spec.encoding.headerless:
            raise invalid(
                f"live StreamingRecognize takes headerless audio (LINEAR16, LINEAR32F, MULAW or ALAW with "
                f"sample_rate_hertz), not {spec.encoding.value}; send files with Recognize"
            )
        self.service = service
        self.metrics = service.metrics
        self.settings = settings
        self.config = streaming_config.config
        self.interim = streaming_config.interim_results
        self.single = streaming_config.single_utterance
        self.voice_events = streaming_config.enable_voice_activity_events
        self.use_vad = self.single or self.voice_events
        self.spec = spec
        self.options = options
        self.request_id = request_id
        self.rate = service.sample_rate
        self._vad_models = vad_models
        self.items: asyncio.Queue[Any] = asyncio.Queue()
        self.turns: list[_TurnResults] = []
        self._results: dict[Turn, _TurnResults] = {}
        self.live: LiveSession | None = None
        self.samples_in = 0
        self.first_audio_at: float | None = None
        self._first_partial_seen = False
        self._stop_reading = False

    # ------------------------------------------------------------------ the RPC side

    async def run(self, audio_in: AsyncIterator[bytes]) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        started = time.monotonic()
        outcome = "error"
        self.live = live = await self._live_session()
        reader = asyncio.ensure_future(self._read(audio_in, live))
        try:
            async for item in until_done(self.items):
                if isinstance(item, _TurnResults):
                    async for response in until_done(item.queue):
                        yield response
                    if self.single:
                        break  # END_OF_SINGLE_UTTERANCE: no more results
                else:
                    yield item
            outcome = "ok"
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "cancelled"
            if any(not t.turn.finished for t in self.turns):
                self.service.series.requests_cancelled.inc()
            raise
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            live.abort_all()
            self.metrics.request_duration.labels(api=API, mode="streaming", outcome=outcome).observe(
                time.monotonic() - started)
            self.metrics.request_audio_seconds.labels(api=API, mode="streaming").observe(self.samples_in / self.rate)
            logger.info("StreamingRecognize %s (live): %.2f s of audio, %d turn(s), %s", self.request_id,
                        self.samples_in / self.rate, len(self.turns), outcome)

    async def _live_session(self) -> LiveSession:
        """The call's live session: server VAD turns for voice events / single utterance."""
        vad = None
        if self.use_vad:
            vad = await self._vad_models.batcher()
            if vad is None:
                raise RpcError(grpc.StatusCode.INTERNAL, f"the server VAD model ({self._vad_models.kind}) failed to "
                                                         f"load: {self._vad_models.error}")
            if self.rate != VAD_SAMPLE_RATE:
                raise RpcError(grpc.StatusCode.UNIMPLEMENTED, "server VAD needs a 16 kHz model")
        s = self.settings
        detection = TurnSettings(threshold=s.vad_threshold, silence_duration_ms=s.vad_silence_duration_ms,
                                 prefix_padding_ms=s.vad_prefix_padding_ms) if vad is not None else None
        return LiveSession(self.service, self._on_event, options=self.options, vad=vad, turn_detection=detection,
                           label=f"stream {self.request_id}")

    def _response(self, **fields: Any) -> pb.StreamingRecognizeResponse:
        return pb.StreamingRecognizeResponse(request_id=google_request_id(self.request_id),
                                             oasr_request_id=self.request_id,
                                             total_billed_time=billed(self.samples_in / self.rate), **fields)

    def _event(self, kind: int, at_seconds: float) -> pb.StreamingRecognizeResponse:
        return self._response(speech_event_type=kind, speech_event_time=duration(at_seconds))

    # ------------------------------------------------------------------ the audio side

    async def _read(self, audio_in: AsyncIterator[bytes], live: LiveSession) -> None:
        try:
            chunker = PcmChunker(self.spec, self.rate, self.settings)
            async for data in audio_in:
                if self._stop_reading:
                    break  # single utterance over: later audio is ignored
                if data and self.first_audio_at is None:
                    self.first_audio_at = time.monotonic()
                samples = self._count(chunker.push(data))
                if samples.size:  # nothing yet: a partial frame, or the resampler's latency
                    await live.push(samples)
            if not self._stop_reading:
                tail = self._count(chunker.flush())
                if not self.samples_in:
                    raise invalid("the stream carried no audio_content before half-close")
                if tail.size:
                    await live.push(tail)
                await live.end_turn()
            self.items.put_nowait(DONE)
        except Exception as exc:
            self._fail(exc)

    def _count(self, samples: Any) -> Any:
        self.samples_in += len(samples)
        if samples.size:
            self.metrics.audio_seconds.labels(api=API, mode="streaming").inc(len(samples) / self.rate)
        return samples

    def _fail(self, exc: BaseException) -> None:
        """Deliver a reader error wherever the RPC side is waiting."""
        for turn in self.turns:
            if not turn.turn.finished:
                turn.queue.put_nowait(exc)
        self.items.put_nowait(exc)

    # ------------------------------------------------------------------ turn events

    async def _on_event(self, event: LiveEvent) -> None:
        if isinstance(event, SpeechBegan):
            if self.voice_events:
                self.items.put_nowait(self._event(Event.SPEECH_ACTIVITY_BEGIN, event.speech_start_ms / 1000))
        elif isinstance(event, TurnOpened):
            results = _TurnResults(event.turn)
            self.turns.append(results)
            self._results[event.turn] = results
            self.items.put_nowait(results)
        elif isinstance(event, TurnRefused):
            raise event.error  # ends the call (the reader delivers it)
        elif isinstance(event, SpeechEnded):
            results = self.turns[-1]
            if self.voice_events:
                results.queue.put_nowait(self._event(Event.SPEECH_ACTIVITY_END, event.speech_end_ms / 1000))
            if self.single:
                results.queue.put_nowait(self._event(Event.END_OF_SINGLE_UTTERANCE, event.speech_end_ms / 1000))
                self._stop_reading = True
                self._stop_turns()
        elif isinstance(event, TurnPartial | TurnFinal | TurnFailed | TurnAborted):
            results = self._results[event.turn]
            try:
                self._on_output(results, event)
            except Exception as exc:  # keep the RPC side from waiting forever
                results.queue.put_nowait(exc)

    def _on_output(self, results: _TurnResults, event: TurnPartial | TurnFinal | TurnFailed | TurnAborted) -> None:
        out = event.output
        if isinstance(event, TurnPartial):
            text = out.text.strip()
            if not text or text == results.last_text:
                return
            results.last_text = text
            self._observe_first_partial()
            if self.interim:
                results.queue.put_nowait(self._partial(results, out, text))
            return
        if isinstance(event, TurnFailed):
            self._stop_turns()  # the call ends with this turn's error: no new turns meanwhile
        results.queue.put_nowait(self._final(results, out))
        results.queue.put_nowait(DONE)

    def _stop_turns(self) -> None:
        if self.live is not None:
            self.live.stop()

    # ------------------------------------------------------------------ engine outputs

    def _offset(self, results: _TurnResults) -> float:
        """Seconds from the start of the stream to the turn's first sample."""
        return results.turn.start / self.rate

    def _observe_first_partial(self) -> None:
        if not self._first_partial_seen and self.first_audio_at is not None:
            self._first_partial_seen = True
            self.metrics.time_to_first_partial.labels(api=API).observe(time.monotonic() - self.first_audio_at)

    def _partial(self, results: _TurnResults, out: RequestOutput, text: str) -> pb.StreamingRecognizeResponse:
        committed = len(out.committed.strip())
        result = pb.StreamingRecognitionResult(
            alternatives=[pb.SpeechRecognitionAlternative(transcript=text)],
            is_final=False,
            stability=min(committed / len(text), 1.0) if text else 0.0,
            result_end_time=duration(self._offset(results) + out.duration),
            language_code=result_language(out, self.config),
        )
        return self._response(results=[result])

    def _final(self, results: _TurnResults, out: RequestOutput) -> Any:
        if out.finish_reason == "error":
            if out.error_stage == "shutdown":
                return RpcError(grpc.StatusCode.UNAVAILABLE, "server is shutting down; the stream was cancelled")
            return RpcError(grpc.StatusCode.INTERNAL, f"recognition failed at {out.error_stage}: {out.error}")
        if out.finish_reason == "abort":
            return RpcError(grpc.StatusCode.CANCELLED, "the stream's recognition was aborted")
        if out.text.strip():
            self._observe_first_partial()
        result = pb.StreamingRecognitionResult(
            alternatives=alternatives(out, self.config, offset=self._offset(results)),
            is_final=True,
            result_end_time=duration(self._offset(results) + out.duration),
            language_code=result_language(out, self.config),
        )
        return self._response(results=[result])
