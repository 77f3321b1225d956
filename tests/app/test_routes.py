"""Route logic in process: option parsing, rendering (json, text, srt, vtt, verbose_json, SSE,
Google RecognizeResponse), error envelopes, limits and middleware.

The app is the real `create_app()` with the real `EngineService` bridge and audio decoder; only
the engine behind the bridge is a small scripted fake, so these tests run in milliseconds and
can check exact rendering. End-to-end behaviour with the real model is in tests/e2e/.
"""

from __future__ import annotations

import asyncio
import io
import json
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from app.admission import LIVE_PROVE_S, LIVE_START, Admission, Refused
from app.audio import AudioDecoder
from app.backlog import LIVE_RETRY_AFTER_S, LIVE_SETTLE_S
from app.engine_service import EngineService
from app.google.wire import google_request_id
from app.main import create_app
from app.model_pool import ModelPool
from app.settings import Settings
from engine import DecodingOptions, EngineConfig, RequestOutput
from engine.errors import UnsupportedError
from engine.metrics import EngineMetrics
from engine.runner import ModelInfo, RunnerStats
from engine.types import Alternative, Segment, Word

RATE = 16000  # Hz


def wav(seconds: float = 3.2, rate: int = RATE) -> bytes:
    buf = io.BytesIO()
    t = np.arange(int(seconds * rate)) / rate
    sf.write(buf, (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate, format="WAV")
    return buf.getvalue()


def canned(request_id: str, audio: np.ndarray, options: DecodingOptions) -> RequestOutput:
    """What the fake engine answers: two segments, word timings, two alternatives."""
    words = [Word(" Hello", 0.0, 1.5, 0.9), Word(" world.", 1.5, 3.2, 0.8)]
    return RequestOutput(
        request_id=request_id, text="Hello world.", finished=True, finish_reason="stop", language="en",
        duration=len(audio) / RATE,
        segments=[Segment(0, 0.0, 1.5, " Hello", tokens=[1, 2], avg_logprob=-0.25, no_speech_prob=0.01,
                          compression_ratio=1.1),
                  Segment(1, 1.5, 3.2, " world.", tokens=[3], avg_logprob=-0.5)],
        words=words if options.word_timestamps else None,
        nbest=[Alternative("Hello world.", 0.75), Alternative("Hello, world!", 0.5)][: options.n_best],
    )


class FakeRunner:
    """The runner facts the bridge reads after a step: a family with no KV pool and no decode slots."""

    def stats(self) -> RunnerStats:
        return RunnerStats()


@dataclass
class FakeEngine:
    """The engine surface EngineService drives, scripted: every request is answered by
    `answer` at the next step, or held until aborted when `answer` returns None."""

    answer: Callable[[str, np.ndarray, DecodingOptions], RequestOutput | None] = canned
    sample_rate: int = RATE
    streaming_enabled: bool = True
    """Live sessions are gated by cadence as on a streaming engine (no test streams audio to it)."""
    config: EngineConfig = field(default_factory=lambda: EngineConfig(device="cpu"))
    model_info: ModelInfo = field(default_factory=lambda: ModelInfo("fake", "fake-asr", RATE, ("en",),
                                                                    decode_methods=("canned",), decode_method="canned"))
    metrics: EngineMetrics = field(default_factory=EngineMetrics)
    runner: FakeRunner = field(default_factory=lambda: FakeRunner())
    taken: int = 0
    """Requests the engine thread has taken from the inbox."""
    received: list[DecodingOptions] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    _inbox: queue.SimpleQueue[tuple[str, str, Any, Any] | None] = field(default_factory=queue.SimpleQueue)
    _held: set[str] = field(default_factory=set)
    _count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def info(self) -> dict[str, Any]:
        return {"family": "fake", "model": "fake-asr", "sample_rate": RATE, "languages": ["en"]}

    @property
    def num_running(self) -> int:
        return len(self._held)

    @property
    def num_waiting(self) -> int:
        return 0

    def validate_options(self, decoding: DecodingOptions | None, streaming: bool = False) -> DecodingOptions:
        options = decoding or DecodingOptions()
        options.validate()
        return options

    def add_request(self, audio: np.ndarray, priority: int = 0, decoding: DecodingOptions | None = None,
                    request_id: str | None = None) -> str:
        options = decoding or DecodingOptions()
        options.validate()
        with self._lock:
            self._count += 1
            rid = request_id or f"fake-{self._count}"
        self.received.append(options)
        self._inbox.put(("add", rid, audio, options))
        return rid

    def abort_request(self, request_id: str) -> None:
        self._inbox.put(("abort", request_id, None, None))

    def has_work(self) -> bool:
        return not self._inbox.empty()

    def wait_for_work(self, timeout: float | None = None) -> bool:
        try:
            item = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return False
        self._inbox.put(item)  # order among commands does not matter to this fake
        return True

    def step(self) -> list[RequestOutput]:
        outputs = []
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is None:
                continue
            kind, rid, audio, options = item
            if kind == "abort":
                self.aborted.append(rid)
                if rid in self._held:
                    self._held.discard(rid)
                    outputs.append(RequestOutput(rid, finished=True, finish_reason="abort"))
                continue
            self.taken += 1
            self.metrics.observe_batch("offline", 1, [0.0])
            out = self.answer(rid, audio, options)
            if out is None:
                self._held.add(rid)
            else:
                outputs.append(out)
        self.metrics.count_outputs(len(outputs))
        return outputs

    def fail_all(self, error: str, stage: str = "engine") -> list[RequestOutput]:
        return []

    def wake(self) -> None:
        self._inbox.put(None)

    def shutdown(self) -> None:
        pass


@dataclass
class Harness:
    client: httpx.AsyncClient
    engine: FakeEngine
    service: EngineService
    app: Any = None

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        return sum(s.value for family in self.service.metrics.registry.collect() for s in family.samples
                   if s.name == name and labels.items() <= s.labels.items())


@pytest.fixture
def settings() -> Settings:
    return Settings(grpc_port=0)


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
async def h(settings: Settings, engine: FakeEngine) -> AsyncIterator[Harness]:
    app = create_app(settings)  # no lifespan under ASGITransport: the parts are put in place here
    service = EngineService(engine, app.state.metrics, settings.max_inflight)  # type: ignore[arg-type]
    service.start()
    await service.wait_started()
    app.state.models = ModelPool.serving(service, served_model_name=settings.served_model_name)
    app.state.decoder = AudioDecoder(1)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://oasr") as client:
        yield Harness(client, engine, service, app)
    app.state.decoder.close()
    service.stop()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for something the engine thread does after the response was sent."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def transcribe(h: Harness, **fields: Any) -> httpx.Response:
    files = {"file": ("a.wav", fields.pop("body", wav()), "audio/wav")}
    return await h.client.post("/v1/audio/transcriptions", files=files, data=fields)


def openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def google_error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"code", "status", "message"} and error["code"] == status and error["status"] == code
    return str(error["message"])


# ------------------------------------------------------------------------- OpenAI shapes


async def test_json_is_the_default_with_usage(h: Harness) -> None:
    r = await transcribe(h, body=wav(3.2))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"text": "Hello world.", "usage": {"type": "duration", "seconds": 4}}
    (options,) = h.engine.received
    assert options == DecodingOptions()  # nothing asked: transcribe, greedy, temperature 0, no words


@pytest.mark.parametrize(("given", "code"), [("en-US", "en"), ("pt_BR", "pt"), ("EN", "en"), ("de", "de")])
async def test_openai_language_accepts_bcp47_as_the_google_route_does(h: Harness, given: str, code: str) -> None:
    r = await transcribe(h, language=given)
    assert r.status_code == 200, r.text
    (options,) = h.engine.received
    assert options.language == code
    r = await h.client.post("/v1/speech:recognize", params={"encoding": "WAV", "language_code": given},
                            content=wav())
    assert r.status_code == 200, r.text
    assert h.engine.received[1].language == code


async def test_form_options_reach_the_engine(h: Harness) -> None:
    r = await transcribe(h, language="EN", prompt="Names: Ada.", temperature="0.4", beam_size="3",
                         response_format="verbose_json", **{"timestamp_granularities[]": ["word", "segment"]})
    assert r.status_code == 200, r.text
    (options,) = h.engine.received
    assert (options.language, options.prompt, options.temperature, options.beam_size, options.word_timestamps,
            options.task) == ("en", "Names: Ada.", 0.4, 3, True, "transcribe")


async def test_text_srt_vtt_rendering(h: Harness) -> None:
    r = await transcribe(h, response_format="text")
    assert r.text == "Hello world.\n" and r.headers["content-type"].startswith("text/plain")
    r = await transcribe(h, response_format="srt")
    assert r.text == "1\n00:00:00,000 --> 00:00:01,500\nHello\n\n2\n00:00:01,500 --> 00:00:03,200\nworld.\n"
    assert r.headers["content-type"].startswith("application/x-subrip")
    r = await transcribe(h, response_format="vtt")
    assert r.text == "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello\n\n00:00:01.500 --> 00:00:03.200\nworld.\n"
    assert r.headers["content-type"].startswith("text/vtt")


async def test_srt_clock_past_one_hour(h: Harness) -> None:
    def late(rid: str, audio: np.ndarray, options: DecodingOptions) -> RequestOutput:
        return RequestOutput(rid, text="Late.", finished=True, finish_reason="stop", duration=3726.0,
                             segments=[Segment(0, 3725.5, 3725.9994, " Late.")])

    h.engine.answer = late
    r = await transcribe(h, response_format="srt")
    assert r.text == "1\n01:02:05,500 --> 01:02:05,999\nLate.\n"


async def test_verbose_json_segments_and_words(h: Harness) -> None:
    r = await transcribe(h, response_format="verbose_json")
    body = r.json()
    assert (body["task"], body["language"], body["duration"], body["text"]) == ("transcribe", "english", 3.2,
                                                                                "Hello world.")
    assert [(s["id"], s["start"], s["end"], s["text"]) for s in body["segments"]] == [
        (0, 0.0, 1.5, " Hello"), (1, 1.5, 3.2, " world.")]
    assert body["segments"][0]["tokens"] == [1, 2] and body["segments"][0]["avg_logprob"] == -0.25
    assert "words" not in body
    r = await transcribe(h, response_format="verbose_json", **{"timestamp_granularities[]": "word"})
    assert r.json()["words"] == [{"word": "Hello", "start": 0.0, "end": 1.5, "confidence": 0.9},
                                 {"word": "world.", "start": 1.5, "end": 3.2, "confidence": 0.8}]


async def test_sse_stream(h: Harness) -> None:
    r = await transcribe(h, stream="true")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = [f.removeprefix("data: ") for f in r.text.split("\n\n") if f]
    assert frames[-1] == "[DONE]"
    events = [json.loads(f) for f in frames[:-1]]
    assert events == [
        {"type": "transcript.text.delta", "delta": "Hello world."},
        {"type": "transcript.text.done", "text": "Hello world.", "usage": {"type": "duration", "seconds": 4}},
    ]
    assert h.metric("oasr_audio_seconds_total", api="openai", mode="offline") == pytest.approx(3.2)
    assert h.metric("oasr_request_duration_seconds_count", api="openai", mode="offline", outcome="ok") == 1
    assert h.service.admission.inflight == 0


async def test_sse_engine_error_is_an_error_event(h: Harness) -> None:
    h.engine.answer = lambda rid, audio, options: RequestOutput(
        rid, finished=True, finish_reason="error", error="decoder blew up", error_stage="decode")
    r = await transcribe(h, stream="true")
    frames = [f.removeprefix("data: ") for f in r.text.split("\n\n") if f]
    assert json.loads(frames[0]) == {"type": "error", "error": {"message": "decoder blew up"}}
    assert frames[-1] == "[DONE]"


async def test_sse_admission_errors_are_http_statuses_and_return_the_permit(h: Harness) -> None:
    real_add = h.engine.add_request

    def refuse_french(audio: np.ndarray, priority: int = 0, decoding: DecodingOptions | None = None,
                      request_id: str | None = None) -> str:
        if decoding is not None and decoding.language == "fr":
            raise UnsupportedError("model fake-asr is English-only")
        return real_add(audio, priority, decoding, request_id)

    h.engine.add_request = refuse_french  # type: ignore[method-assign]
    error = openai_error(await transcribe(h, stream="true", language="fr"), 400)
    assert "English-only" in error["message"]
    error = openai_error(await transcribe(h, stream="true", body=b""), 400)
    assert error["param"] == "file"
    assert h.service.admission.inflight == 0
    assert (await transcribe(h, stream="true")).status_code == 200
    assert h.service.admission.inflight == 0


@pytest.mark.parametrize("settings", [Settings(grpc_port=0, request_timeout_secs=0.2)])
async def test_sse_request_timeout_ends_the_stream_and_aborts(h: Harness) -> None:
    h.engine.answer = lambda rid, audio, options: None  # never finishes on its own
    r = await transcribe(h, stream="true")
    frames = [f.removeprefix("data: ") for f in r.text.split("\n\n") if f]
    assert "--request-timeout-secs" in json.loads(frames[0])["error"]["message"]
    assert frames[-1] == "[DONE]"
    await until(lambda: "fake-1" in h.engine.aborted)
    assert h.metric("oasr_request_duration_seconds_count", api="openai", mode="offline", outcome="error") == 1
    assert h.service.admission.inflight == 0


async def test_translation_forces_translate(h: Harness) -> None:
    files = {"file": ("a.wav", wav(), "audio/wav")}
    r = await h.client.post("/v1/audio/translations", files=files, data={"model": "whisper-1"})
    assert r.status_code == 200, r.text
    assert h.engine.received[0].task == "translate"
    r = await h.client.post("/v1/audio/translations", files=files, data={"model": "whisper-1", "language": "en"})
    assert r.status_code == 200, r.text
    assert (h.engine.received[1].task, h.engine.received[1].language) == ("translate", "en")  # the source language


# ------------------------------------------------------------------------- OpenAI errors


@pytest.mark.parametrize(("fields", "param", "needle"), [
    ({"response_format": "xml"}, "response_format", "json, text, srt, verbose_json, vtt"),
    ({"timestamp_granularities[]": "word"}, "timestamp_granularities", "verbose_json"),
    ({"response_format": "verbose_json", "timestamp_granularities[]": "char"}, "timestamp_granularities", "'char'"),
    ({"stream": "true", "response_format": "vtt"}, "stream", "json or text"),
    ({"temperature": "5"}, None, "temperature must be in [0, 2.0]"),
    ({"temperature": "warm"}, None, "temperature"),
    ({"beam_size": "99"}, None, "beam_size"),
    ({"language": "x"}, None, "language"),
])
async def test_bad_options_are_400_before_any_engine_work(
    h: Harness, fields: dict[str, str], param: str | None, needle: str
) -> None:
    error = openai_error(await transcribe(h, **fields), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert needle in error["message"]
    assert h.engine.received == []


async def test_bad_audio_is_400_with_param_file(h: Harness) -> None:
    error = openai_error(await transcribe(h, body=b""), 400)
    assert error["param"] == "file" and "empty" in error["message"]
    error = openai_error(await transcribe(h, body=b"\x13\x37" * 500), 400)
    assert error["param"] == "file" and "not recognised" in error["message"]
    r = await h.client.post("/v1/audio/transcriptions", data={"model": "whisper-1"})
    assert "file" in openai_error(r, 400)["message"]
    assert h.engine.received == []


@pytest.mark.parametrize("settings", [Settings(grpc_port=0, served_model_name="oasr-small")])
async def test_served_model_name(h: Harness) -> None:
    error = openai_error(await transcribe(h, model="large-v9"), 404)
    assert (error["code"], error["param"], error["type"]) == ("model_not_found", "model", "not_found_error")
    assert "'oasr-small'" in error["message"]
    assert (await transcribe(h, model="oasr-small")).status_code == 200
    assert (await transcribe(h, model="whisper-1")).status_code == 200  # OpenAI's names mean the default
    assert (await transcribe(h)).status_code == 200  # no model field at all is accepted
    models = (await h.client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "oasr-small" and models["data"][0]["info"]["model"] == "fake-asr"


async def test_a_model_no_model_answers_to_is_404_and_openai_names_mean_the_default(h: Harness) -> None:
    error = openai_error(await transcribe(h, model="large-v9"), 404)
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    for name in ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe", "fake-asr"):
        assert (await transcribe(h, model=name)).status_code == 200, name


async def test_engine_error_is_500_and_counted(h: Harness) -> None:
    h.engine.answer = lambda rid, audio, options: RequestOutput(
        rid, finished=True, finish_reason="error", error="out of memory", error_stage="encode")
    error = openai_error(await transcribe(h), 500)
    assert error["type"] == "server_error" and "encode" in error["message"] and "out of memory" in error["message"]
    assert h.metric("oasr_requests_failed_total", stage="encode") == 1


@pytest.mark.parametrize("settings", [Settings(grpc_port=0, request_timeout_secs=0.2)])
async def test_request_timeout_is_408_and_aborts(h: Harness) -> None:
    h.engine.answer = lambda rid, audio, options: None  # never finishes on its own
    error = openai_error(await transcribe(h), 408)
    assert "--request-timeout-secs" in error["message"]
    await until(lambda: "fake-1" in h.engine.aborted)  # the abort reaches the engine thread
    assert h.metric("oasr_request_duration_seconds_count", api="openai", mode="offline", outcome="error") == 1
    assert h.service.admission.inflight == 0


class EngineWithBrokenStats(FakeEngine):
    @property
    def num_running(self) -> int:
        raise RuntimeError("stats broke")


@pytest.mark.parametrize("engine", [EngineWithBrokenStats()])
async def test_a_failing_metrics_observation_does_not_stop_the_engine_thread(h: Harness) -> None:
    for _ in range(2):  # the second request proves the engine thread is still stepping
        r = await transcribe(h)
        assert r.status_code == 200 and r.json()["text"] == "Hello world."


@pytest.mark.parametrize("settings", [Settings(grpc_port=0, max_inflight=1, request_timeout_secs=1.0)])
async def test_at_capacity_is_503_and_probes_still_answer(h: Harness) -> None:
    h.engine.answer = lambda rid, audio, options: None
    held = asyncio.ensure_future(transcribe(h))
    while h.service.admission.inflight == 0:
        await asyncio.sleep(0.01)
    error = openai_error(await transcribe(h), 503)
    assert "capacity" in error["message"] and "--max-inflight" in error["message"]
    # over capacity is RESOURCE_EXHAUSTED in seed 001's table; UNAVAILABLE is for shutdown or a lost engine
    message = google_error(await h.client.post("/v1/speech:recognize", params={"encoding": "WAV"}, content=wav()),
                           503, "RESOURCE_EXHAUSTED")
    assert "capacity" in message
    assert (await h.client.get("/readyz")).status_code == 200
    assert (await h.client.get("/metrics")).status_code == 200
    assert h.metric("oasr_requests_busy_total") == 2
    assert (await held).status_code == 408


async def test_draining_refuses_with_503_and_readiness_fails(h: Harness) -> None:
    h.service.admission.draining = True
    error = openai_error(await transcribe(h), 503)
    assert "shutting down" in error["message"]
    message = google_error(await h.client.post("/v1/speech:recognize", params={"encoding": "WAV"}, content=wav()),
                           503, "UNAVAILABLE")
    assert "shutting down" in message
    r = await h.client.get("/readyz")
    assert r.status_code == 503 and r.json()["draining"] is True


async def test_after_the_drain_cancelled_work_no_request_enters_the_engine(h: Harness) -> None:
    """A handler that held its permit through the grace (still decoding) is refused at the engine."""
    await h.service.cancel_all("server is shutting down")
    assert not h.service.admission.draining  # only the cancel ran: the permit is still granted
    error = openai_error(await transcribe(h), 503)
    assert "shutting down" in error["message"]
    assert h.engine.received == []


async def test_readiness_holds_through_one_long_step_but_not_a_stuck_one(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.engine_thread as bridge

    release = threading.Event()

    def slow(rid: str, audio: np.ndarray, options: DecodingOptions) -> RequestOutput:
        release.wait(10)  # on the engine thread, inside step(): a long batch on a slow CPU
        return canned(rid, audio, options)

    h.engine.answer = slow
    monkeypatch.setattr(bridge, "HEARTBEAT_MAX_AGE_S", 0.05)
    pending = asyncio.ensure_future(transcribe(h))
    await until(lambda: h.engine.taken > 0)
    await asyncio.sleep(0.2)  # the heartbeat is now older than its bound
    assert (await h.client.get("/readyz")).status_code == 200  # a step is running: busy, not dead
    monkeypatch.setattr(bridge, "STUCK_STEP_S", 0.1)
    r = await h.client.get("/readyz")
    assert r.status_code == 503 and r.json()["ready"] is False  # that step has run too long
    release.set()
    assert (await pending).status_code == 200
    monkeypatch.setattr(bridge, "HEARTBEAT_MAX_AGE_S", 5.0)
    await until(lambda: h.service.ready)


# ------------------------------------------------------------------------------- Google


async def test_google_recognize_shape_and_options(h: Harness) -> None:
    pcm = (np.zeros(int(1.25 * 8000), dtype="<i2")).tobytes()
    r = await h.client.post("/v1/speech:recognize", content=pcm, params={
        "encoding": "linear16", "sample_rate": 8000, "language_code": "en-US", "enable_word_time_offsets": "true",
        "max_alternatives": 2, "request_id": "abc"})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "results": [{
            "alternatives": [
                {"transcript": "Hello world.", "confidence": 0.75, "words": [
                    {"startTime": "0s", "endTime": "1.500s", "word": "Hello", "confidence": 0.9},
                    {"startTime": "1.500s", "endTime": "3.200s", "word": "world.", "confidence": 0.8}]},
                {"transcript": "Hello, world!", "confidence": 0.5},
            ],
            "resultEndTime": "1.250s",
            "languageCode": "en",
        }],
        "totalBilledTime": "2s",
        "requestId": str(google_request_id("abc")),
        "oasrRequestId": "abc",
    }
    (options,) = h.engine.received
    assert (options.language, options.word_timestamps, options.beam_size, options.n_best) == ("en", True, 2, 2)


async def test_google_errors_use_the_google_envelope(h: Harness) -> None:
    message = google_error(await h.client.post("/v1/speech:recognize", content=wav()), 400, "INVALID_ARGUMENT")
    assert "encoding" in message and "required" in message
    message = google_error(await h.client.post("/v1/speech:recognize", params={"encoding": "OPUS_RAW"},
                                               content=wav()), 400, "INVALID_ARGUMENT")
    assert "OPUS_RAW" in message and "LINEAR16" in message
    message = google_error(await h.client.post("/v1/speech:recognize", params={"encoding": "WAV", "temperature": 9},
                                               content=wav()), 400, "INVALID_ARGUMENT")
    assert "temperature" in message
    message = google_error(await h.client.post("/v1/speech:recognize", params={"encoding": "WAV",
                                                                             "max_alternatives": "many"},
                                               content=wav()), 400, "INVALID_ARGUMENT")
    assert "max_alternatives" in message
    assert h.engine.received == []


# ------------------------------------------------------------------- probes, middleware


async def test_probes_models_metrics(h: Harness) -> None:
    assert (await h.client.get("/healthz")).json() == {"status": "ok"}
    r = await h.client.get("/readyz")
    assert r.status_code == 200 and r.json()["ready"] is True and r.json()["steps"] >= 1
    models = (await h.client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "fake-asr" and models["data"][0]["info"]["family"] == "fake"
    r = await h.client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=") and b"oasr_http_requests_total" in r.content


async def test_http_metrics_use_route_patterns(h: Harness) -> None:
    await h.client.get("/v1/models")
    await h.client.get("/v1/models/../secret-path-42")
    await h.client.post("/v1/speech:recognize", content=b"")
    assert h.metric("oasr_http_requests_total", method="GET", route="/v1/models", status="200") == 1
    assert h.metric("oasr_http_requests_total", method="POST", route="/v1/speech:recognize", status="400") == 1
    assert h.metric("oasr_http_requests_total", method="GET", route="<unmatched>", status="404") == 1
    text = (await h.client.get("/metrics")).text
    assert "secret-path-42" not in text


async def test_unknown_route_and_method_use_the_error_envelope(h: Harness) -> None:
    error = openai_error(await h.client.get("/v1/audio/nothing-here"), 404)
    assert "/v1/audio/nothing-here" in error["message"]
    openai_error(await h.client.get("/v1/audio/transcriptions"), 405)
    google_error(await h.client.get("/v1/speech:recognize"), 405, "UNIMPLEMENTED")


@pytest.mark.parametrize("settings", [Settings(grpc_port=0, api_key=["s3cret", "other"])])
async def test_api_keys(h: Harness) -> None:
    for headers in ({}, {"authorization": "Bearer nope"}, {"x-api-key": "s3cre"}):
        r = await transcribe(h) if not headers else await h.client.get("/v1/models", headers=headers)
        error = openai_error(r, 401)
        assert error["code"] == "invalid_api_key" and r.headers["www-authenticate"] == "Bearer"
    google_error(await h.client.post("/v1/speech:recognize", content=b""), 401, "UNAUTHENTICATED")
    assert (await h.client.get("/healthz")).status_code == 200
    assert (await h.client.get("/readyz")).status_code == 200
    assert (await h.client.get("/metrics")).status_code == 401
    assert (await h.client.get("/v1/models", headers={"authorization": "Bearer other"})).status_code == 200
    assert (await h.client.get("/v1/models", headers={"x-api-key": "s3cret"})).status_code == 200
    # what Google's clients send for ClientOptions(api_key=...)
    assert (await h.client.get("/v1/models", headers={"x-goog-api-key": "s3cret"})).status_code == 200
    assert h.engine.received == []
    # refused before routing, still counted under the route pattern
    assert h.metric("oasr_http_requests_total", method="POST", route="/v1/audio/transcriptions", status="401") == 1
    assert h.metric("oasr_http_requests_total", method="GET", route="/v1/models", status="401") == 2
    assert h.metric("oasr_http_requests_total", method="POST", route="/v1/speech:recognize", status="401") == 1


@pytest.mark.parametrize("settings", [Settings(grpc_port=0, max_audio_mib=0.01)])
async def test_body_limit_with_and_without_content_length(h: Harness) -> None:
    big = bytes(20_000)  # > 0.01 MiB
    error = openai_error(await transcribe(h, body=big), 413)
    assert error["code"] == "body_too_large" and "--max-audio-mib" in error["message"]

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield bytes(4096)

    r = await h.client.post("/v1/speech:recognize", params={"encoding": "LINEAR16", "sample_rate": 16000},
                            content=chunks())
    assert "--max-audio-mib" in google_error(r, 413, "RESOURCE_EXHAUSTED")
    assert h.engine.received == []
    assert h.metric("oasr_http_requests_total", method="POST", route="/v1/audio/transcriptions", status="413") == 1
    assert h.metric("oasr_http_requests_total", method="POST", route="/v1/speech:recognize", status="413") == 1


@pytest.mark.parametrize("settings", [Settings(grpc_port=0, max_audio_seconds=2.0)])
async def test_overlong_audio_is_413(h: Harness) -> None:
    error = openai_error(await transcribe(h, body=wav(3.0)), 413)
    assert error["param"] == "file" and "2" in error["message"]
    assert h.engine.received == []


PREFLIGHT = {"origin": "https://app.example", "access-control-request-method": "POST",
             "access-control-request-headers": "authorization"}


async def test_cors_is_off_by_default(h: Harness) -> None:
    r = await h.client.get("/v1/models", headers={"origin": "https://app.example"})
    assert "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("settings", [Settings(grpc_port=0, cors_allow_origin=["https://app.example"],
                                               api_key=["s3cret"])])
async def test_cors_allows_the_configured_origin_before_the_key_check(h: Harness) -> None:
    r = await h.client.options("/v1/audio/transcriptions", headers=PREFLIGHT)  # browsers send no key here
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    r = await h.client.options("/v1/audio/transcriptions", headers={**PREFLIGHT, "origin": "https://evil.example"})
    assert r.headers.get("access-control-allow-origin") != "https://evil.example"
    r = await h.client.get("/v1/models", headers={"origin": "https://app.example", "x-api-key": "s3cret"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"


async def test_offline_work_over_the_queue_delay_is_refused_with_retry_after(h: Harness) -> None:
    h.service.admission.max_queue_delay_secs = 30.0
    h.service.backlog.add("ahead", 100.0)  # 100 audio-seconds queued, transcribed at 2x real time
    h.service.backlog.rate = 2.0
    r = await transcribe(h)
    error = openai_error(r, 503)
    assert r.headers["retry-after"] == "20" and "--max-queue-delay-secs" in error["message"]
    r = await h.client.post("/v1/speech:recognize", params={"encoding": "WAV"}, content=wav())
    assert google_error(r, 503, "RESOURCE_EXHAUSTED") and r.headers["retry-after"] == "20"
    readiness = (await h.client.get("/readyz")).json()
    assert readiness["ready"] is True and readiness["queue_delay_s"] == 50.0
    assert h.engine.received == []  # nothing reached the engine
    h.service.backlog.forget("ahead")
    assert (await transcribe(h)).status_code == 200


async def upgrade(app: Any, path: str) -> list[dict[str, Any]]:
    """Offer a WebSocket upgrade to the ASGI app; the messages it answers with (a denial is an
    HTTP response: `websocket.http.response.*`)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"} if not sent else {"type": "websocket.disconnect", "code": 1000}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "ws",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [],
             "server": ("oasr", 80), "client": ("127.0.0.1", 1234), "subprotocols": [],
             "extensions": {"websocket.http.response": {}}}
    await app(scope, receive, send)
    return sent


def clocked(h: Harness, clock: list[float]) -> Admission:
    """The harness's engine admitted on a clock the test moves (load admission on)."""
    async def sleep(seconds: float) -> None:  # a live session's wait moves the test's clock, not the test's
        clock[0] += seconds
        await asyncio.sleep(0)

    h.service.admission = Admission(h.service.admission.max_inflight, 30.0,
                                    on_busy=h.service.series.requests_busy.inc, clock=lambda: clock[0], sleep=sleep)
    return h.service.admission


async def test_a_burst_of_live_sessions_is_admitted_in_a_slow_start(h: Harness) -> None:
    """Sessions opened together: LIVE_START are admitted on trust, the next once those have run
    LIVE_PROVE_S without the engine shedding a pass (then twice as many), each refusal a 503 with
    Retry-After and the reason on both WebSocket surfaces."""
    clock = [100.0]
    admission = clocked(h, clock)
    admission.max_inflight = 100
    permits = [admission.take(live=True) for _ in range(LIVE_START)]
    for path in ("/v1/realtime", "/v1/listen"):
        start, *rest = await upgrade(h.app, path)
        assert start["status"] == 503 and (b"retry-after", str(LIVE_RETRY_AFTER_S).encode()) in start["headers"]
        assert b"have not shown yet" in b"".join(m.get("body", b"") for m in rest)
    clock[0] += LIVE_PROVE_S
    admission.observe(0.1, LIVE_START, 0)  # no pass shed: the first ones are proven
    permits += [admission.take(live=True) for _ in range(LIVE_START)]
    assert admission.refusal(live=True, count=False) is not None
    assert h.metric("oasr_requests_busy_total") == 2
    for p in permits:
        p.release()
    assert admission.live.open == 0 and admission.inflight == 0


async def test_a_live_session_refused_a_permit_is_not_counted_as_admitted(h: Harness) -> None:
    """A session refused by --max-inflight never opens, so it must not hold back the next ones."""
    clock = [100.0]
    admission = clocked(h, clock)
    admission.max_inflight = admission.inflight  # full
    with pytest.raises(Refused, match="--max-inflight"):
        admission.take(live=True)
    assert admission.live.open == 0 and admission.live.limit() == LIVE_START
    admission.max_inflight += 1
    admission.take(live=True).release()


async def test_new_live_sessions_are_refused_while_the_engine_sheds_live_passes(h: Harness) -> None:
    """However few sessions are open, a new one is refused while the engine sheds the admitted
    streams' passes for being behind their cadence, with the reason in the refusal; offline work
    too (it would only slow them further)."""
    clock = [100.0]
    admission = clocked(h, clock)
    held = admission.take(live=True)  # a session open (the fake engine reports no stream)
    admission.observe(0.1, 8, passes_shed=2)
    for path in ("/v1/realtime", "/v1/listen"):
        start, *rest = await upgrade(h.app, path)
        assert start["status"] == 503 and (b"retry-after", str(LIVE_RETRY_AFTER_S).encode()) in start["headers"]
        assert b"behind their cadence" in b"".join(m.get("body", b"") for m in rest)
    assert h.service.admission.inflight == 1 and h.metric("oasr_requests_busy_total") == 2
    r = await transcribe(h)
    assert openai_error(r, 503) and r.headers["retry-after"] == str(LIVE_RETRY_AFTER_S)
    clock[0] += LIVE_SETTLE_S
    assert admission.refusal(live=True, count=False) is None
    assert (await transcribe(h)).status_code == 200
    held.release()
