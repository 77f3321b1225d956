"""One live StreamingRecognize call: headerless chunks -> (server VAD turns) -> engine streaming
requests -> interim and final results.

    reader task:  audio_content -> PcmChunker (frames, one resampler) -> TurnDetector? ->
                  open a turn's engine request / feed it / end its input
    per turn:     forwarder task: engine outputs -> interim results, one final result
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
import numpy as np

from app.engine_service import EngineService, OutputStream
from app.grpc.audio import PcmChunker
from app.grpc.convert import AudioSpec, RpcError, alternatives, billed, duration, invalid, result_language
from app.settings import Settings
from engine import DecodingOptions, RequestOutput
from engine.errors import UnknownRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb

logger = logging.getLogger(__name__)

API = "grpc"
Event = pb.StreamingRecognizeResponse.SpeechEventType


class _Done:
    """End marker of a queue."""


DONE = _Done()


@dataclass(eq=False)
class _Turn:
    """One utterance: its engine request and the responses it produced, in order."""

    stream: OutputStream
    offset: float
    """Seconds from the start of the stream to the turn's first sample."""
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    input_ended: bool = False
    finished: bool = False
    forwarder: asyncio.Task[None] | None = None


class VadProvider:
    """Loads the server VAD model once (on first use), shared by every stream."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._model: Any = None
        self._lock = asyncio.Lock()

    async def detector(self) -> Any:
        from engine.vad import TurnDetector, TurnSettings, load_vad_model

        async with self._lock:
            if self._model is None:
                self._model = await asyncio.to_thread(load_vad_model, self.settings.vad)
                logger.info("server VAD for gRPC streams: %s", self.settings.vad)
        s = self.settings
        return TurnDetector(self._model, TurnSettings(threshold=s.vad_threshold,
                                                      silence_duration_ms=s.vad_silence_duration_ms,
                                                      prefix_padding_ms=s.vad_prefix_padding_ms))


class LiveSession:
    def __init__(
        self,
        service: EngineService,
        settings: Settings,
        streaming_config: pb.StreamingRecognitionConfig,
        spec: AudioSpec,
        options: DecodingOptions,
        request_id: str,
        vad: VadProvider,
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
        self.rate = service.engine.sample_rate
        self._vad_provider = vad
        self.items: asyncio.Queue[Any] = asyncio.Queue()
        self.turns: list[_Turn] = []
        self.samples_in = 0
        self.first_audio_at: float | None = None
        self._first_partial_seen = False
        self._stop_reading = False

    # ------------------------------------------------------------------ the RPC side

    async def run(self, audio_in: AsyncIterator[bytes]) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        started = time.monotonic()
        outcome = "error"
        detector = await self._vad_provider.detector() if self.use_vad else None
        if detector is not None and self.rate != 16000:
            raise RpcError(grpc.StatusCode.UNIMPLEMENTED, "server VAD needs a 16 kHz model")
        reader = asyncio.ensure_future(self._read(audio_in, detector))
        try:
            while True:
                item = await self.items.get()
                if item is DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, _Turn):
                    async for response in self._drain_turn(item):
                        yield response
                    if self.single:
                        break  # END_OF_SINGLE_UTTERANCE: no more results
                else:
                    yield item
            outcome = "ok"
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "cancelled"
            if any(not t.finished for t in self.turns):
                self.metrics.requests_cancelled.inc()
            raise
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            for turn in self.turns:
                if turn.forwarder is not None:
                    turn.forwarder.cancel()
                self.service.close(turn.stream.request_id)
            self.metrics.request_duration.labels(api=API, mode="streaming", outcome=outcome).observe(
                time.monotonic() - started)
            logger.info("StreamingRecognize %s (live): %.2f s of audio, %d turn(s), %s", self.request_id,
                        self.samples_in / self.rate, len(self.turns), outcome)

    async def _drain_turn(self, turn: _Turn) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        while True:
            item = await turn.queue.get()
            if item is DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _response(self, **fields: Any) -> pb.StreamingRecognizeResponse:
        return pb.StreamingRecognizeResponse(request_id=self.request_id,
                                             total_billed_time=billed(self.samples_in / self.rate), **fields)

    def _event(self, kind: int, at_seconds: float) -> pb.StreamingRecognizeResponse:
        return self._response(speech_event_type=kind, speech_event_time=duration(at_seconds))

    # ------------------------------------------------------------------ the audio side

    async def _read(self, audio_in: AsyncIterator[bytes], detector: Any) -> None:
        try:
            chunker = PcmChunker(self.spec, self.rate, self.settings)
            async for data in audio_in:
                if self._stop_reading:
                    break  # single utterance over: later audio is ignored
                if data and self.first_audio_at is None:
                    self.first_audio_at = time.monotonic()
                await self._route(chunker.push(data), detector, last=False)
            if not self._stop_reading:
                await self._route(chunker.flush(), detector, last=True)
            self.items.put_nowait(DONE)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Deliver a reader error wherever the RPC side is waiting."""
        for turn in self.turns:
            if not turn.finished:
                turn.queue.put_nowait(exc)
        self.items.put_nowait(exc)

    async def _route(self, samples: np.ndarray, detector: Any, *, last: bool) -> None:
        start = self.samples_in
        self.samples_in += len(samples)
        if samples.size:
            self.metrics.audio_seconds.labels(api=API, mode="streaming").inc(len(samples) / self.rate)
        if detector is None:
            if not self.turns:
                if not samples.size:  # nothing yet (a partial frame, resampler latency), or nothing at all
                    if last:
                        raise invalid("the stream carried no audio_content before half-close")
                    return
                self._open_turn(0.0)
            self._feed(self.turns[0], samples, last)
            return
        from engine.vad import SpeechStarted, SpeechStopped, TurnAudio

        events = list(await asyncio.to_thread(detector.feed, samples)) if samples.size else []
        if last:
            events += detector.flush()
        if last and start == 0 and not samples.size:
            raise invalid("the stream carried no audio_content before half-close")
        for event in events:
            if isinstance(event, SpeechStarted):
                if self.voice_events:
                    self.items.put_nowait(self._event(Event.SPEECH_ACTIVITY_BEGIN, event.speech_start_ms / 1000))
                self._open_turn(event.audio_start_ms / 1000)
            elif isinstance(event, TurnAudio):
                self._feed(self.turns[-1], event.audio, False)
            elif isinstance(event, SpeechStopped):
                turn = self.turns[-1]
                self._feed(turn, np.zeros(0, dtype=np.float32), True)
                if self.voice_events:
                    turn.queue.put_nowait(self._event(Event.SPEECH_ACTIVITY_END, event.speech_end_ms / 1000))
                if self.single:
                    turn.queue.put_nowait(self._event(Event.END_OF_SINGLE_UTTERANCE, event.speech_end_ms / 1000))
                    self._stop_reading = True
                    break

    def _open_turn(self, offset: float) -> None:
        stream = self.service.open_request(None, streaming=True, decoding=self.options)
        turn = _Turn(stream=stream, offset=offset)
        self.turns.append(turn)
        turn.forwarder = asyncio.ensure_future(self._forward(turn))
        self.items.put_nowait(turn)

    def _feed(self, turn: _Turn, samples: np.ndarray, last: bool) -> None:
        if turn.input_ended or turn.finished:
            return
        try:
            self.service.feed(turn.stream.request_id, samples.astype(np.float32, copy=False), is_last=last)
        except UnknownRequestError:
            # the engine already finished this turn (e.g. its cache ceiling): later audio has no home
            logger.info("stream %s: turn ended by the engine; dropping %d samples", self.request_id, len(samples))
        turn.input_ended = last

    # ------------------------------------------------------------------ engine outputs

    async def _forward(self, turn: _Turn) -> None:
        last_text = None
        try:
            while True:
                out = await turn.stream.get()
                if out.finished:
                    turn.finished = True
                    turn.queue.put_nowait(self._final(turn, out))
                    turn.queue.put_nowait(DONE)
                    return
                text = out.text.strip()
                if not text or text == last_text:
                    continue
                last_text = text
                self._observe_first_partial()
                if self.interim:
                    turn.queue.put_nowait(self._partial(turn, out, text))
        except Exception as exc:  # keep the RPC side from waiting forever
            turn.queue.put_nowait(exc)

    def _observe_first_partial(self) -> None:
        if not self._first_partial_seen and self.first_audio_at is not None:
            self._first_partial_seen = True
            self.metrics.time_to_first_partial.labels(api=API).observe(time.monotonic() - self.first_audio_at)

    def _partial(self, turn: _Turn, out: RequestOutput, text: str) -> pb.StreamingRecognizeResponse:
        committed = len(out.committed.strip())
        result = pb.StreamingRecognitionResult(
            alternatives=[pb.SpeechRecognitionAlternative(transcript=text)],
            is_final=False,
            stability=min(committed / len(text), 1.0) if text else 0.0,
            result_end_time=duration(turn.offset + out.duration),
            language_code=result_language(out, self.config),
        )
        return self._response(results=[result])

    def _final(self, turn: _Turn, out: RequestOutput) -> Any:
        if out.finish_reason == "error":
            if out.error_stage == "shutdown":
                return RpcError(grpc.StatusCode.UNAVAILABLE, "server is shutting down; the stream was cancelled")
            return RpcError(grpc.StatusCode.INTERNAL, f"recognition failed at {out.error_stage}: {out.error}")
        if out.finish_reason == "abort":
            return RpcError(grpc.StatusCode.CANCELLED, "the stream's recognition was aborted")
        if out.text.strip():
            self._observe_first_partial()
        result = pb.StreamingRecognitionResult(
            alternatives=alternatives(out, self.config, offset=turn.offset),
            is_final=True,
            result_end_time=duration(turn.offset + out.duration),
            language_code=result_language(out, self.config),
        )
        return self._response(results=[result])
