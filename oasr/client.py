"""Python clients of an OASR server: `OASRClient` (blocking) and `AsyncOASRClient` (asyncio).

    from oasr.client import OASRClient

    client = OASRClient("http://127.0.0.1:8000")
    print(client.transcribe("meeting.mp3").text)                       # REST, any container
    timed = client.transcribe("talk.wav", response_format="verbose_json", timestamp_granularities=["word"])
    print(client.recognize("meeting.flac").transcript)                 # gRPC Recognize
    for event in client.stream_file("talk.wav"):                       # /v1/realtime, live
        print(event.text, end="\\n" if event.is_final else "\\r")

    async with AsyncOASRClient("http://127.0.0.1:8000") as client:
        async for event in client.stream(mic_chunks(), sample_rate=16000):
            print(event.text, end="\\n" if event.is_final else "\\r")

A live stream survives a dropped connection: the session is resumed on a new one (the server
keeps it for --realtime-resume-grace-secs) and no audio or event is lost or repeated; a
`StreamEvent` of type 'resumed' says it happened. Errors: see `oasr.types`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

import httpx

from oasr import rpc as grpc_parts
from oasr.audio import CHUNK_MS, pcm_chunks, read_pcm16
from oasr.live import realtime_url, session_update, stream_events
from oasr.types import APIError, Recognition, ServerUnreachable, StreamEvent, Transcription

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 600.0
"""Per HTTP request and gRPC call: long files take a while (the server's own limit is 600 s)."""
CONNECT_TIMEOUT_S = 10.0
STREAM_RATE_HZ = 16000
"""Rate files are streamed at: the models' own, so the server resamples nothing."""

AudioInput = str | os.PathLike[str] | bytes | IO[bytes]
"""A file path, the file's bytes, or an open binary file."""
ResponseFormat = Literal["json", "verbose_json", "text", "srt", "vtt"]


def _api_key(api_key: str | None) -> str | None:
    if api_key:
        return api_key
    keys = [k.strip() for k in os.environ.get("OASR_API_KEY", "").split(",") if k.strip()]
    return keys[0] if keys else None


def _audio_bytes(audio: AudioInput) -> tuple[str, bytes]:
    """(file name, bytes) of an audio input."""
    if isinstance(audio, bytes):
        return "audio", audio
    if isinstance(audio, (str, os.PathLike)):
        path = Path(audio)
        return path.name, path.read_bytes()
    return Path(str(getattr(audio, "name", "audio"))).name, audio.read()


def _form(*, model: str | None, language: str | None, prompt: str | None, response_format: ResponseFormat,
          timestamp_granularities: Sequence[str] | None, temperature: float | None) -> dict[str, Any]:
    form: dict[str, Any] = {"response_format": response_format}
    for key, value in (("model", model), ("language", language), ("prompt", prompt), ("temperature", temperature)):
        if value is not None:
            form[key] = str(value)
    if timestamp_granularities:
        form["timestamp_granularities[]"] = list(timestamp_granularities)
    return form


def _http_error(response: httpx.Response) -> APIError:
    """The server's own message from an OpenAI- or Google-shaped error body, else the status line."""
    try:
        body = response.json()
        message = str(body["error"]["message"])
    except (ValueError, KeyError, TypeError):
        body, message = None, response.text.strip()[:200] or response.reason_phrase
    return APIError(message, response.status_code, body)


def _transcription(response: httpx.Response, response_format: ResponseFormat) -> Transcription:
    if response.status_code != 200:
        raise _http_error(response)
    if response_format not in ("json", "verbose_json"):
        return Transcription(text=response.text, raw=response.text)
    body = response.json()
    return Transcription(text=body.get("text", ""), language=body.get("language"), duration=body.get("duration"),
                         segments=list(body.get("segments") or []), words=list(body.get("words") or []), raw=body)


def _unreachable(base_url: str, exc: Exception) -> ServerUnreachable:
    return ServerUnreachable(f"cannot reach the server at {base_url}: {exc}")


class AsyncOASRClient:
    """An asyncio client of one server: REST, realtime WebSocket and gRPC. Use as
    `async with AsyncOASRClient(url) as client:`, or call `aclose()`."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, grpc_target: str | None = None) -> None:
        """`api_key`: for a server started with OASR_API_KEY (default: the first key in $OASR_API_KEY).
        `grpc_target`: host:port of its gRPC listener (default: the URL's host, port 50051)."""
        self.base_url = base_url.rstrip("/")
        self.api_key = _api_key(api_key)
        self.timeout = timeout
        self.grpc_target = grpc_target or grpc_parts.grpc_target(self.base_url)
        self._headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self._headers,
                                       timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
        self._channel: Any = None

    async def __aenter__(self) -> AsyncOASRClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    # ------------------------------------------------------------------ REST

    async def _post_audio(self, path: str, audio: AudioInput, form: dict[str, Any]) -> httpx.Response:
        name, data = _audio_bytes(audio)
        try:
            return await self._http.post(path, data=form, files={"file": (name, data)})
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _unreachable(self.base_url, exc) from exc

    async def transcribe(self, audio: AudioInput, *, model: str | None = None, language: str | None = None,
                         prompt: str | None = None, response_format: ResponseFormat = "json",
                         timestamp_granularities: Sequence[Literal["word", "segment"]] | None = None,
                         temperature: float | None = None) -> Transcription:
        """POST /v1/audio/transcriptions: the file in any container the server decodes.
        `timestamp_granularities=["word"]` (with verbose_json) fills `words`."""
        form = _form(model=model, language=language, prompt=prompt, response_format=response_format,
                     timestamp_granularities=timestamp_granularities, temperature=temperature)
        return _transcription(await self._post_audio("/v1/audio/transcriptions", audio, form), response_format)

    async def translate(self, audio: AudioInput, *, model: str | None = None, language: str | None = None,
                        prompt: str | None = None, response_format: ResponseFormat = "json",
                        temperature: float | None = None) -> Transcription:
        """POST /v1/audio/translations: English text of speech in `language` (multilingual Whisper models)."""
        form = _form(model=model, language=language, prompt=prompt, response_format=response_format,
                     timestamp_granularities=None, temperature=temperature)
        return _transcription(await self._post_audio("/v1/audio/translations", audio, form), response_format)

    async def models(self) -> list[dict[str, Any]]:
        """GET /v1/models: one entry per served model name, with the model's card under `info`."""
        try:
            response = await self._http.get("/v1/models")
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _unreachable(self.base_url, exc) from exc
        if response.status_code != 200:
            raise _http_error(response)
        return list(response.json().get("data", []))

    # ------------------------------------------------------------------ realtime

    async def stream(self, chunks: Iterable[bytes] | AsyncIterable[bytes], *, sample_rate: int = STREAM_RATE_HZ,
                     language: str | None = None, vad: bool | None = False, prompt: str | None = None,
                     pace_s: float | None = None) -> AsyncIterator[StreamEvent]:
        """Live transcription over /v1/realtime. `chunks`: headerless 16-bit mono PCM at
        `sample_rate` (any sync or async iterable; frames go out as binary). `vad`: False (the
        default) makes all the audio one utterance, True lets server VAD cut utterances, None keeps
        the server's default. `pace_s`: seconds between chunks (None: as they come). Yields partials
        and each utterance's final; ends when every utterance is final."""
        import websockets

        from oasr.realtime import ResumingRealtimeClient

        client = ResumingRealtimeClient(realtime_url(self.base_url), self._headers, rate=sample_rate)
        try:
            await client.connect()
        except websockets.InvalidStatus as exc:
            raise APIError(_ws_refusal(exc), exc.response.status_code) from exc
        except (OSError, asyncio.TimeoutError) as exc:
            raise _unreachable(self.base_url, exc) from exc
        # aclosing: a caller that stops early closes the inner generator here, in order, rather than
        # leaving both to the loop's shutdown, which closes them concurrently ("aclose(): asynchronous
        # generator is already running")
        events = stream_events(client, chunks, update=session_update(sample_rate, language, vad, prompt), pace_s=pace_s)
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    async def stream_file(self, path: str | os.PathLike[str], *, speed: float | None = None,
                          language: str | None = None, vad: bool | None = False,
                          prompt: str | None = None) -> AsyncIterator[StreamEvent]:
        """Play an audio file (any container) through `stream` as 20 ms frames: `speed` 1 is real
        time, 2 twice as fast; None sends it as fast as the connection takes it."""
        pcm = await asyncio.to_thread(read_pcm16, path, STREAM_RATE_HZ)
        pace = None if speed is None else CHUNK_MS / 1000 / speed
        events = self.stream(pcm_chunks(pcm, STREAM_RATE_HZ), sample_rate=STREAM_RATE_HZ, language=language, vad=vad,
                             prompt=prompt, pace_s=pace)
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    # ------------------------------------------------------------------ gRPC

    async def recognize(self, audio: AudioInput, *, encoding: str = "AUTO", sample_rate: int = 0,
                        language: str | None = None, word_time_offsets: bool = False, max_alternatives: int = 1,
                        model: str | None = None) -> Recognition:
        """gRPC Recognize: the whole file in one call. `encoding`: AUTO detects the container;
        headerless LINEAR16 / LINEAR32F / MULAW / ALAW need `sample_rate`."""
        import grpc

        from protos.oasr.speech.v1 import speech_pb2_grpc

        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.grpc_target, options=grpc_parts.CHANNEL_OPTIONS)
        request = grpc_parts.recognize_request(_audio_bytes(audio)[1], encoding=encoding, sample_rate=sample_rate,
                                               language=language, word_time_offsets=word_time_offsets,
                                               max_alternatives=max_alternatives, model=model)
        try:
            response = await speech_pb2_grpc.SpeechStub(self._channel).Recognize(  # type: ignore[no-untyped-call]
                request, timeout=self.timeout, metadata=grpc_parts.metadata(self.api_key))
        except grpc.RpcError as exc:
            raise grpc_parts.rpc_error(exc, self.grpc_target) from exc
        return grpc_parts.to_recognition(response)


def _ws_refusal(exc: Any) -> str:
    import json

    try:
        return str(json.loads(exc.response.body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"the server refused the WebSocket (HTTP {exc.response.status_code})"


class _LoopThread:
    """An event loop on its own thread, so the blocking client can run the async one's streams
    (their sender task keeps going while the caller handles an event)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="oasr-client-loop", daemon=True)
        self._thread.start()

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wait() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wait(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class OASRClient:
    """A blocking client of one server: REST, realtime WebSocket and gRPC. Use as
    `with OASRClient(url) as client:`, or call `close()`."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, grpc_target: str | None = None) -> None:
        """Arguments as `AsyncOASRClient`'s."""
        self.base_url = base_url.rstrip("/")
        self.api_key = _api_key(api_key)
        self.timeout = timeout
        self.grpc_target = grpc_target or grpc_parts.grpc_target(self.base_url)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers,
                                  timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
        self._channel: Any = None

    def __enter__(self) -> OASRClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _post_audio(self, path: str, audio: AudioInput, form: dict[str, Any]) -> httpx.Response:
        name, data = _audio_bytes(audio)
        try:
            return self._http.post(path, data=form, files={"file": (name, data)})
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _unreachable(self.base_url, exc) from exc

    def transcribe(self, audio: AudioInput, *, model: str | None = None, language: str | None = None,
                   prompt: str | None = None, response_format: ResponseFormat = "json",
                   timestamp_granularities: Sequence[Literal["word", "segment"]] | None = None,
                   temperature: float | None = None) -> Transcription:
        """As `AsyncOASRClient.transcribe`."""
        form = _form(model=model, language=language, prompt=prompt, response_format=response_format,
                     timestamp_granularities=timestamp_granularities, temperature=temperature)
        return _transcription(self._post_audio("/v1/audio/transcriptions", audio, form), response_format)

    def translate(self, audio: AudioInput, *, model: str | None = None, language: str | None = None,
                  prompt: str | None = None, response_format: ResponseFormat = "json",
                  temperature: float | None = None) -> Transcription:
        """As `AsyncOASRClient.translate`."""
        form = _form(model=model, language=language, prompt=prompt, response_format=response_format,
                     timestamp_granularities=None, temperature=temperature)
        return _transcription(self._post_audio("/v1/audio/translations", audio, form), response_format)

    def models(self) -> list[dict[str, Any]]:
        """As `AsyncOASRClient.models`."""
        try:
            response = self._http.get("/v1/models")
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _unreachable(self.base_url, exc) from exc
        if response.status_code != 200:
            raise _http_error(response)
        return list(response.json().get("data", []))

    def recognize(self, audio: AudioInput, *, encoding: str = "AUTO", sample_rate: int = 0,
                  language: str | None = None, word_time_offsets: bool = False, max_alternatives: int = 1,
                  model: str | None = None) -> Recognition:
        """As `AsyncOASRClient.recognize`."""
        import grpc

        from protos.oasr.speech.v1 import speech_pb2_grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(self.grpc_target, options=grpc_parts.CHANNEL_OPTIONS)
        request = grpc_parts.recognize_request(_audio_bytes(audio)[1], encoding=encoding, sample_rate=sample_rate,
                                               language=language, word_time_offsets=word_time_offsets,
                                               max_alternatives=max_alternatives, model=model)
        try:
            response = speech_pb2_grpc.SpeechStub(self._channel).Recognize(  # type: ignore[no-untyped-call]
                request, timeout=self.timeout, metadata=grpc_parts.metadata(self.api_key))
        except grpc.RpcError as exc:
            raise grpc_parts.rpc_error(exc, self.grpc_target) from exc
        return grpc_parts.to_recognition(response)

    def stream(self, chunks: Iterable[bytes], *, sample_rate: int = STREAM_RATE_HZ, language: str | None = None,
               vad: bool | None = False, prompt: str | None = None,
               pace_s: float | None = None) -> Iterator[StreamEvent]:
        """As `AsyncOASRClient.stream`, for a sync iterable of PCM chunks."""
        return self._iterate(lambda client: client.stream(chunks, sample_rate=sample_rate, language=language,
                                                          vad=vad, prompt=prompt, pace_s=pace_s))

    def stream_file(self, path: str | os.PathLike[str], *, speed: float | None = None, language: str | None = None,
                    vad: bool | None = False, prompt: str | None = None) -> Iterator[StreamEvent]:
        """As `AsyncOASRClient.stream_file`."""
        return self._iterate(lambda client: client.stream_file(path, speed=speed, language=language, vad=vad,
                                                               prompt=prompt))

    def _iterate(self, make: Callable[[AsyncOASRClient], AsyncIterator[StreamEvent]]) -> Iterator[StreamEvent]:
        """Drive an async stream on a private loop thread, one event per `next()`."""
        runner = _LoopThread()
        client = AsyncOASRClient(self.base_url, api_key=self.api_key, timeout=self.timeout,
                                 grpc_target=self.grpc_target)
        events = make(client)
        try:
            while True:
                try:
                    yield runner.run(events.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            runner.run(events.aclose())  # type: ignore[attr-defined]
            runner.run(client.aclose())
            runner.close()


__all__ = ["DEFAULT_URL", "AsyncOASRClient", "AudioInput", "OASRClient", "ResponseFormat"]
