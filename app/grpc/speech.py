"""The `oasr.speech.v1.Speech` servicer: Recognize and StreamingRecognize over `EngineService`.

Every call is counted in `oasr_grpc_requests_total{method,code}` and timed in
`oasr_grpc_request_duration_seconds{method}` when it ends; a client that cancels
(or whose deadline passes) cancels the handler task, whose `finally` aborts the engine request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from app.audio import AudioDecoder
from app.channels import run_offline_channels, waveforms
from app.engine_service import EngineService
from app.google.convert import (
    AudioSpec,
    alternatives,
    audio_spec,
    billed,
    channel_results,
    decoding_options,
    duration,
    recognize_response,
    result_language,
)
from app.google.wire import google_request_id, new_request_id
from app.grpc.audio import BufferedAudio
from app.grpc.auth import presented_keys
from app.grpc.channels import ChannelCalls
from app.grpc.convert import RpcError, invalid, to_rpc_error
from app.grpc.live import LiveCall
from app.grpc.operations import submit_operation
from app.jobs.system import JobSystem
from app.live import VadModelCache
from app.metrics import Metrics
from app.middleware import key_matches
from app.model_pool import ModelPool
from app.offline import RequestTimeout
from app.requests import admit_options
from app.settings import Settings
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc

logger = logging.getLogger(__name__)

API = "grpc"
STREAMING_API = "grpc_streaming"  # the `api` label of StreamingRecognize, buffered or live


class ActiveCalls:
    """Recognition calls in progress (health watches excluded), so the drain knows when it is done."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.count += 1
        self._idle.clear()

    def leave(self) -> None:
        self.count -= 1
        if self.count <= 0:
            self.count = 0
            self._idle.set()

    async def idle(self) -> None:
        await self._idle.wait()


@dataclass(frozen=True)
class GrpcDeps:
    """What the gRPC servicers work with, handed over by the lifespan once they exist (the
    servicers know nothing of the FastAPI app)."""

    settings: Settings
    models: ModelPool
    decoder: AudioDecoder
    metrics: Metrics
    vad_models: VadModelCache
    jobs: JobSystem | None = None


class SpeechServicer(speech_pb2_grpc.SpeechServicer):
    def __init__(self, deps: GrpcDeps, calls: ActiveCalls | None = None):
        self.settings = deps.settings
        self.models = deps.models
        self.decoder = deps.decoder
        self.metrics = deps.metrics
        self._deps = deps
        self._calls = calls or ActiveCalls()

    # ------------------------------------------------------------------ plumbing

    def _authorize(self, context: grpc.aio.ServicerContext) -> None:
        keys = self.settings.api_key
        if keys and not key_matches(presented_keys(context), keys):
            raise RpcError(grpc.StatusCode.UNAUTHENTICATED,
                           "invalid or missing API key (send metadata 'authorization: Bearer <key>' or 'x-api-key')")

    def _status(self, exc: Exception, method: str) -> RpcError:
        try:
            return to_rpc_error(exc, draining=self.models.draining)
        except Exception:
            logger.exception("%s failed", method)
            return RpcError(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

    def _count(self, method: str, code: grpc.StatusCode, started: float) -> None:
        self.metrics.observe_grpc(method, code.name, time.monotonic() - started)

    def _timeout(self, context: grpc.aio.ServicerContext) -> tuple[float, bool]:
        """The server's request timeout, or the client's deadline when that comes first (True)."""
        timeout = self.settings.request_timeout_secs
        remaining = context.time_remaining()
        if remaining is not None and remaining < timeout:
            return max(remaining, 0.0), True
        return timeout, False

    # ------------------------------------------------------------------ Recognize

    async def Recognize(self, request: pb.RecognizeRequest, context: grpc.aio.ServicerContext) -> pb.RecognizeResponse:
        code = grpc.StatusCode.OK
        started = time.monotonic()
        self._calls.enter()
        try:
            self._authorize(context)
            return await self._recognize(request, context)
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as exc:
            err = self._status(exc, "Recognize")
            code = err.code
            await context.abort(err.code, err.message, trailing_metadata=err.trailing_metadata)
            raise  # not reached: abort raises
        finally:
            self._calls.leave()
            self._count("Recognize", code, started)

    async def _recognize(self, request: pb.RecognizeRequest, context: grpc.aio.ServicerContext) -> pb.RecognizeResponse:
        config = request.config
        service = await self.models.service_for(config.model or None)  # pinned until the permit below
        spec = audio_spec(config)
        options = admit_options(service, decoding_options(config))
        source = request.audio.WhichOneof("audio_source")
        if source == "uri":
            raise invalid("RecognitionAudio.uri is not supported: this server fetches nothing from outside; "
                          "send the bytes in RecognitionAudio.content")
        if not request.audio.content:
            raise invalid("RecognitionAudio.content is empty; send the audio bytes in it")
        rid = config.request_id or new_request_id()
        separate = config.enable_separate_recognition_per_channel
        async with service.admission.admit():
            audio = await self.decoder.decode(request.audio.content, encoding=spec.encoding,
                                              sample_rate=spec.sample_rate, channels=spec.channels,
                                              max_seconds=self.settings.max_audio_seconds, keep_channels=separate)
            outs = await self._run_offline(service, waveforms(audio, separate), options, context)
        logger.info("Recognize %s: %.2f s of audio, %d channel(s)", rid, audio.duration, len(outs))
        if not separate:
            return recognize_response(outs[0], config, rid)
        return pb.RecognizeResponse(request_id=google_request_id(rid), oasr_request_id=rid, total_billed_time=billed(audio.duration),
                                    results=channel_results(outs, config, separate))

    async def _run_offline(self, service: EngineService, channels: list[Any], options: Any,
                           context: grpc.aio.ServicerContext, api: str = API) -> Any:
        """`run_offline` on each waveform at once (one, unless per-channel); their outputs in order."""
        timeout, clients = self._timeout(context)
        try:
            return await run_offline_channels(service, channels, options, api=api, timeout=timeout)
        except RequestTimeout as exc:
            message = "the call's deadline passed before recognition finished" if clients else exc.message
            raise RpcError(grpc.StatusCode.DEADLINE_EXCEEDED, message) from exc

    # ------------------------------------------------------------------ LongRunningRecognize

    async def LongRunningRecognize(
        self, request: pb.LongRunningRecognizeRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        """Queue a batch job (app/jobs); its Operation comes back at once."""
        code = grpc.StatusCode.OK
        started = time.monotonic()
        try:
            self._authorize(context)
            if self._deps.jobs is None:
                raise RpcError(grpc.StatusCode.UNIMPLEMENTED, "batch jobs are not enabled on this server")
            return await submit_operation(self._deps.jobs, request)
        except RpcError as err:
            code = err.code
            await context.abort(err.code, err.message, trailing_metadata=err.trailing_metadata)
            raise  # not reached: abort raises
        finally:
            self._count("LongRunningRecognize", code, started)

    # ------------------------------------------------------------------ StreamingRecognize

    async def StreamingRecognize(
        self, request_iterator: AsyncIterator[pb.StreamingRecognizeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        code = grpc.StatusCode.OK
        started = time.monotonic()
        self._calls.enter()
        try:
            self._authorize(context)
            async for response in self._streaming(request_iterator, context):
                yield response
        except (asyncio.CancelledError, GeneratorExit):
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as exc:
            err = self._status(exc, "StreamingRecognize")
            code = err.code
            await context.abort(err.code, err.message, trailing_metadata=err.trailing_metadata)
        finally:
            self._calls.leave()
            self._count("StreamingRecognize", code, started)

    async def _streaming(
        self, requests: AsyncIterator[pb.StreamingRecognizeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        it = aiter(requests)
        try:
            first = await asyncio.wait_for(anext(it), self.settings.stream_idle_timeout_secs)
        except StopAsyncIteration:
            raise invalid("the stream ended before its first message; send streaming_config first") from None
        except TimeoutError:
            raise self._idle() from None
        if first.WhichOneof("streaming_request") != "streaming_config":
            raise invalid("the first StreamingRecognizeRequest must carry streaming_config (and no audio); "
                          "audio_content goes in the messages after it")
        streaming_config = first.streaming_config
        config = streaming_config.config
        service = await self.models.service_for(config.model or None)  # pinned until the permit below
        spec = audio_spec(config)
        options = decoding_options(config)  # checked against the model where the call opens its requests
        rid = config.request_id or new_request_id()
        audio_in = self._audio(it)

        def live_call(call_spec: AudioSpec) -> LiveCall:
            return LiveCall(service, self.settings, streaming_config, call_spec, options, rid,
                            self._deps.vad_models)

        live = self._live(service, streaming_config, spec)
        async with service.admission.admit(live=live):
            gauge = self.metrics.stream_sessions_active.labels(api=STREAMING_API)
            gauge.inc()
            try:
                if config.enable_separate_recognition_per_channel and live:
                    async for response in ChannelCalls(streaming_config, spec, live_call).run(audio_in):
                        yield response
                elif config.enable_separate_recognition_per_channel:
                    yield await self._buffered_channels(service, audio_in, spec, options, config, rid, context)
                elif live:
                    async for response in live_call(spec).run(audio_in):
                        yield response
                else:
                    yield await self._buffered(service, audio_in, spec, options, config, rid, context)
            finally:
                gauge.dec()

    async def _buffered_channels(
        self,
        service: EngineService,
        audio_in: AsyncIterator[bytes],
        spec: AudioSpec,
        options: Any,
        config: pb.RecognitionConfig,
        rid: str,
        context: grpc.aio.ServicerContext,
    ) -> pb.StreamingRecognizeResponse:
        """Offline engine, enable_separate_recognition_per_channel: the stream is buffered whole, then
        every channel is recognized as its own request; one final result per channel."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in audio_in:
            size += len(chunk)
            if size > self.settings.max_body_bytes:
                raise RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"the stream is larger than {self.settings.max_audio_mib:g} MiB (--max-audio-mib)")
            chunks.append(chunk)
        if not size:
            raise invalid("the stream carried no audio_content before half-close")
        audio = await self.decoder.decode(b"".join(chunks), encoding=spec.encoding, sample_rate=spec.sample_rate,
                                          channels=spec.channels, max_seconds=self.settings.max_audio_seconds,
                                          keep_channels=True)
        outs = await self._run_offline(service, waveforms(audio, True), options, context, api=STREAMING_API)
        results = [
            pb.StreamingRecognitionResult(alternatives=r.alternatives, is_final=True, result_end_time=r.result_end_time,
                                          language_code=r.language_code, channel_tag=r.channel_tag)
            for r in channel_results(outs, config, True)
        ]
        return pb.StreamingRecognizeResponse(results=results, total_billed_time=billed(audio.duration),
                                             request_id=google_request_id(rid), oasr_request_id=rid)

    def _live(self, service: EngineService, streaming_config: pb.StreamingRecognitionConfig, spec: AudioSpec) -> bool:
        """Streaming engines always; an offline engine too when the client wants utterances cut by
        the server VAD (headerless audio only), each then recognized when its speech ends."""
        if service.engine.streaming_enabled:
            return True
        return spec.encoding.headerless and (
            streaming_config.single_utterance or streaming_config.enable_voice_activity_events
        )

    def _idle(self) -> RpcError:
        return RpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no audio for {self.settings.stream_idle_timeout_secs:g} s (--stream-idle-timeout-secs); "
                        "the stream was closed")

    async def _audio(self, it: AsyncIterator[pb.StreamingRecognizeRequest]) -> AsyncIterator[bytes]:
        """The audio_content of the messages after the config, until half-close."""
        while True:
            try:
                msg = await asyncio.wait_for(anext(it), self.settings.stream_idle_timeout_secs)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise self._idle() from None
            if msg.WhichOneof("streaming_request") != "audio_content":
                raise invalid("only the first StreamingRecognizeRequest may carry streaming_config; "
                              "later messages carry audio_content")
            yield msg.audio_content

    async def _buffered(
        self,
        service: EngineService,
        audio_in: AsyncIterator[bytes],
        spec: Any,
        options: Any,
        config: pb.RecognitionConfig,
        rid: str,
        context: grpc.aio.ServicerContext,
    ) -> pb.StreamingRecognizeResponse:
        """Offline engine: the whole stream is one utterance, recognized after half-close."""
        buffer = BufferedAudio(spec, service.sample_rate, self.settings)
        started = time.monotonic()
        async for chunk in audio_in:
            buffer.add(chunk)
        if not buffer.received:
            raise invalid("the stream carried no audio_content before half-close")
        samples = await buffer.finish(self.decoder)
        if not len(samples):
            raise invalid("the stream's audio holds no samples")
        [out] = await self._run_offline(service, [samples], options, context, api=STREAMING_API)
        logger.info("StreamingRecognize %s (buffered): %.2f s of audio in %.2f s", rid, out.duration,
                    time.monotonic() - started)
        result = pb.StreamingRecognitionResult(
            alternatives=alternatives(out, config), is_final=True, result_end_time=duration(out.duration),
            language_code=result_language(out, config),
        )
        return pb.StreamingRecognizeResponse(results=[result], total_billed_time=billed(out.duration),
                                             request_id=google_request_id(rid), oasr_request_id=rid)


__all__ = ["SpeechServicer"]
