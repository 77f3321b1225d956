"""Several models per server (OASR_MODELS), end to end: one real server serving the embedded
Whisper tiny.en and a reference-written NeMo CTC checkpoint (tests/fixtures/nemo), routed by
`model` on every surface (OpenAI REST and SSE, realtime, Google REST, gRPC Recognize,
StreamingRecognize and LongRunningRecognize, Deepgram /v1/listen), the second model loaded
only when first used, and an unknown model refused on each surface.

The NeMo fixture's weights are the reference's own random initialisation, so its transcript is
meaningless but deterministic: the tests check that every surface naming it gets the very text
the REST route gives for the same audio (and not Whisper's), while Whisper's is scored against
the clip's reference transcript.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import soundfile as sf
import websockets
from google.longrunning import operations_pb2, operations_pb2_grpc

from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.conftest import wer
from tests.e2e.conftest import REPO, ServerProcess, start_server
from tests.e2e.test_grpc import metric_value
from tests.e2e.test_realtime_common import COMMITTED, TERMINAL, chunks_of
from tests.paths import SPEECH_DATA

CLIP = "libri_61-70968-0000"  # 4.9 s, 16 kHz PCM_16 FLAC: the same samples reach every surface
REFERENCE = "HE BEGAN A CONFUSED COMPLAINT AGAINST THE WIZARD WHO HAD VANISHED BEHIND THE CURTAIN ON THE LEFT"
NEMO_FIXTURE = REPO / "tests" / "fixtures" / "nemo" / "ctc_striding_bn" / "model.nemo"
WHISPER, NEMO = "tiny.en", "nemo-ctc"
MAX_WER = 10.0  # percent: tiny.en gets this clip right but for casing and punctuation
TIMEOUT_S = 120.0


def nemo_checkpoint(tmp: Path) -> str:
    ckpt = tmp / "nemo"
    ckpt.mkdir()
    shutil.copy(NEMO_FIXTURE, ckpt / "model.nemo")
    return str(ckpt)


def start_two_model_server(tmp: Path, **env: str) -> ServerProcess:
    return start_server(tmp, env={"OASR_MODELS": f"{WHISPER},{NEMO}={nemo_checkpoint(tmp)}", **env})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_two_model_server(tmp_path_factory.mktemp("models"))
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[speech_pb2_grpc.SpeechStub]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        yield speech_pb2_grpc.SpeechStub(channel)


def clip_bytes() -> bytes:
    return (SPEECH_DATA / f"{CLIP}.flac").read_bytes()


def clip_pcm16() -> bytes:
    """The clip's own 16-bit samples, as a live client sends them."""
    samples, rate = sf.read(SPEECH_DATA / f"{CLIP}.flac", dtype="int16")
    assert rate == 16000 and samples.ndim == 1
    return samples.astype("<i2").tobytes()


def transcribe(server: ServerProcess, model: str | None, **form: str) -> httpx.Response:
    data = {"model": model, **form} if model is not None else form
    return httpx.post(f"{server.base_url}/v1/audio/transcriptions", files={"file": ("a.flac", clip_bytes())},
                      data=data, timeout=TIMEOUT_S)


def models(server: ServerProcess) -> dict[str, dict[str, Any]]:
    body = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()
    return {m["id"]: m for m in body["data"]}


@pytest.fixture(scope="module")
def rest(server: ServerProcess) -> dict[str, str]:
    """Each model's REST transcript of the clip: what every other surface must give."""
    texts = {}
    for model in (WHISPER, NEMO):
        r = transcribe(server, model)
        assert r.status_code == 200, r.text
        texts[model] = r.json()["text"]
    return texts


# ------------------------------------------------------------------ listing, lazy load, readiness


def test_the_second_model_loads_only_when_first_used(server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs first in the module (pytest keeps file order): nothing has named the NeMo model yet."""
    from app.cli import main as oasr

    assert oasr(["models", "--url", server.base_url]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{WHISPER}\tstate=loaded family=whisper device=cpu service_mode=offline",
                                                    f"{NEMO}\tstate=unloaded family=nemo service_mode=offline"]
    listed = models(server)
    assert list(listed) == [WHISPER, NEMO]
    assert listed[WHISPER]["loaded"] and listed[WHISPER]["info"]["family"] == "whisper"
    assert not listed[NEMO]["loaded"] and listed[NEMO]["state"] == "unloaded"
    described = listed[NEMO]["info"]  # from the checkpoint's configuration: its capabilities before a load
    assert described["described"] is True and described["family"] == "nemo" and "kernels" not in described
    ready = httpx.get(f"{server.base_url}/readyz", timeout=10)
    assert ready.status_code == 200
    assert {k: v["state"] for k, v in ready.json()["models"].items()} == {WHISPER: "loaded", NEMO: "unloaded"}
    assert metric_value(server, "oasr_model_loaded", model=NEMO) == 0.0  # no series yet
    assert transcribe(server, NEMO).status_code == 200
    listed = models(server)
    assert listed[NEMO]["loaded"] and listed[NEMO]["info"]["family"] == "nemo"
    assert listed[NEMO]["info"]["capabilities"] != listed[WHISPER]["info"]["capabilities"]
    loaded = listed[NEMO]["info"]
    assert "described" not in loaded and {k: loaded[k] for k in described if k != "described"} == {
        k: v for k, v in described.items() if k != "described"}
    assert metric_value(server, "oasr_model_loaded", model=NEMO) == 1.0
    assert metric_value(server, "oasr_model_loads_total", model=NEMO) == 1.0


def test_rest_routes_by_model(server: ServerProcess, rest: dict[str, str]) -> None:
    assert wer([REFERENCE], [rest[WHISPER]]) <= MAX_WER, rest[WHISPER]
    assert rest[NEMO] and rest[NEMO] != rest[WHISPER]
    for name in (None, "whisper-1"):  # no model, or the SDKs' default name: the first model
        r = transcribe(server, name)
        assert r.status_code == 200 and r.json()["text"] == rest[WHISPER], r.text
    assert transcribe(server, NEMO, response_format="text").text.strip() == rest[NEMO]


def test_sse_routes_by_model(server: ServerProcess, rest: dict[str, str]) -> None:
    r = transcribe(server, NEMO, stream="true")
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert events[-1]["type"] == "transcript.text.done" and events[-1]["text"] == rest[NEMO]


def test_per_model_engine_metrics(server: ServerProcess, rest: dict[str, str]) -> None:
    """Each model's engine is its own series: engine label = its position in OASR_MODELS."""
    nemo_model = models(server)[NEMO]["info"]["model"]
    assert metric_value(server, "oasr_requests_admitted_total", engine="1", model=nemo_model) >= 1
    assert metric_value(server, "oasr_requests_admitted_total", engine="0", model=WHISPER) >= 1


def test_google_rest_routes_by_model(server: ServerProcess, rest: dict[str, str]) -> None:
    body = {"config": {"model": NEMO}, "audio": {"content": base64.b64encode(clip_bytes()).decode()}}
    r = httpx.post(f"{server.base_url}/v1/speech:recognize", json=body, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["alternatives"][0]["transcript"] == rest[NEMO]
    r = httpx.post(f"{server.base_url}/v1/speech:recognize", params={"encoding": "AUTO", "model": NEMO},
                   content=clip_bytes(), timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["alternatives"][0]["transcript"] == rest[NEMO]


def test_grpc_recognize_and_streaming_route_by_model(stub: speech_pb2_grpc.SpeechStub, rest: dict[str, str]) -> None:
    for model in (NEMO, WHISPER):
        config = pb.RecognitionConfig(model=model)
        response = stub.Recognize(pb.RecognizeRequest(config=config, audio=pb.RecognitionAudio(content=clip_bytes())),
                                  timeout=TIMEOUT_S)
        assert response.results[0].alternatives[0].transcript == rest[model]
    config = pb.RecognitionConfig(model=NEMO, encoding=pb.RecognitionConfig.LINEAR16, sample_rate_hertz=16000)
    messages = [pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(config=config))]
    messages += [pb.StreamingRecognizeRequest(audio_content=c) for c in chunks_of(clip_pcm16(), 3200)]
    finals = [r.alternatives[0].transcript for resp in stub.StreamingRecognize(iter(messages), timeout=TIMEOUT_S)
              for r in resp.results if r.is_final]
    assert finals == [rest[NEMO]]


def test_grpc_long_running_recognize_routes_by_model(stub: speech_pb2_grpc.SpeechStub, server: ServerProcess,
                                                     rest: dict[str, str]) -> None:
    request = pb.LongRunningRecognizeRequest(config=pb.RecognitionConfig(model=NEMO),
                                             audio=pb.RecognitionAudio(content=clip_bytes()))
    operation = stub.LongRunningRecognize(request, timeout=TIMEOUT_S)
    with grpc.insecure_channel(server.grpc_target) as channel:
        ops = operations_pb2_grpc.OperationsStub(channel)
        deadline = time.monotonic() + TIMEOUT_S
        while not operation.done:
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.2)
            operation = ops.GetOperation(operations_pb2.GetOperationRequest(name=operation.name), timeout=10)
    assert operation.HasField("response"), operation.error
    response = pb.LongRunningRecognizeResponse()
    response.ParseFromString(operation.response.value)
    assert response.results[0].alternatives[0].transcript == rest[NEMO]


# ------------------------------------------------------------------ live surfaces


async def realtime_turn(ws: Any, model: str) -> dict[str, Any]:
    """One manual turn of the clip on `model`; its session.updated and terminal event."""
    await ws.send(json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None,
        "transcription": {"model": model}}}}}))
    updated = await next_event(ws, ("session.updated", "error"))
    assert updated["type"] == "session.updated", updated
    for chunk in chunks_of(clip_pcm16(), 3200):
        await ws.send(chunk)
    await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
    await next_event(ws, (COMMITTED,))
    return await next_event(ws, TERMINAL)


async def next_event(ws: Any, kinds: tuple[str, ...]) -> dict[str, Any]:
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        if event["type"] in kinds:
            return event  # type: ignore[no-any-return]


def test_realtime_session_switches_model_between_turns(server: ServerProcess, rest: dict[str, str]) -> None:
    async def run() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with websockets.connect(f"{server.ws_url}/v1/realtime?intent=transcription", max_size=None) as ws:
            await next_event(ws, ("session.created",))
            first = await realtime_turn(ws, NEMO)
            second = await realtime_turn(ws, WHISPER)
            await ws.send(json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {
                "input": {"transcription": {"model": "no-such-model"}}}}}))
            refused = await next_event(ws, ("error", "session.updated"))
            return first, second, refused

    first, second, refused = asyncio.run(run())
    assert first["transcript"] == rest[NEMO]
    assert second["transcript"] == rest[WHISPER]
    assert refused["type"] == "error" and refused["error"]["code"] == "model_not_found", refused
    assert refused["error"]["param"].endswith(".model")


def test_a_client_secret_starts_its_session_on_its_model(server: ServerProcess, rest: dict[str, str]) -> None:
    def mint(model: str) -> httpx.Response:
        return httpx.post(f"{server.base_url}/v1/realtime/client_secrets", timeout=TIMEOUT_S, json={
            "session": {"type": "transcription", "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None,
                "transcription": {"model": model}}}}})

    refused = mint("no-such-model")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "model_not_found"
    minted = mint(NEMO)
    assert minted.status_code == 200, minted.text

    async def run() -> dict[str, Any]:
        async with websockets.connect(f"{server.ws_url}/v1/realtime?intent=transcription", max_size=None,
                                      subprotocols=["realtime", f"openai-insecure-api-key.{minted.json()['value']}"],  # type: ignore[list-item]
                                      ) as ws:
            created = await next_event(ws, ("session.created",))
            assert created["session"]["audio"]["input"]["transcription"]["model"] == NEMO
            for chunk in chunks_of(clip_pcm16(), 3200):
                await ws.send(chunk)
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            return await next_event(ws, TERMINAL)

    assert asyncio.run(run())["transcript"] == rest[NEMO]


async def listen(server: ServerProcess, query: str) -> tuple[list[dict[str, Any]], int | None, str]:
    messages = []
    async with websockets.connect(f"{server.ws_url}/v1/listen?{query}", max_size=None) as ws:
        try:
            for chunk in chunks_of(clip_pcm16(), 6400):
                await ws.send(chunk)
            await ws.send(json.dumps({"type": "CloseStream"}))
        except websockets.ConnectionClosed:
            pass  # a refused stream may be closed while the client is still sending; what it was sent is read below
        with pytest.raises(websockets.ConnectionClosed):
            while True:
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
        return messages, ws.close_code, ws.close_reason


def test_listen_routes_by_model(server: ServerProcess, rest: dict[str, str]) -> None:
    for model, family in ((NEMO, "nemo"), (WHISPER, "whisper")):
        messages, code, _ = asyncio.run(listen(server, f"encoding=linear16&sample_rate=16000&model={model}"))
        assert code == 1000
        results = [m for m in messages if m["type"] == "Results"]
        identities = {(r["metadata"]["model_info"]["name"], r["metadata"]["model_info"]["arch"]) for r in results}
        assert results and identities == {(model, family)}
        text = " ".join(r["channel"]["alternatives"][0]["transcript"] for r in results if r["is_final"])
        if model == WHISPER:
            assert wer([REFERENCE], [text]) <= MAX_WER, text


# ------------------------------------------------------------------ unknown model, on every surface


def test_an_unknown_model_is_refused_on_every_surface(server: ServerProcess, stub: speech_pb2_grpc.SpeechStub) -> None:
    r = transcribe(server, "whisper-large")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert f"'{WHISPER}', '{NEMO}'" in r.json()["error"]["message"]
    r = httpx.post(f"{server.base_url}/v1/audio/translations", files={"file": ("a.flac", clip_bytes())},
                   data={"model": "whisper-large"}, timeout=TIMEOUT_S)
    assert r.status_code == 404
    body = {"config": {"model": "whisper-large"}, "audio": {"content": base64.b64encode(clip_bytes()).decode()}}
    r = httpx.post(f"{server.base_url}/v1/speech:recognize", json=body, timeout=TIMEOUT_S)
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    with pytest.raises(grpc.RpcError) as err:
        stub.Recognize(pb.RecognizeRequest(config=pb.RecognitionConfig(model="whisper-large"),
                                           audio=pb.RecognitionAudio(content=clip_bytes())), timeout=TIMEOUT_S)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    messages, code, reason = asyncio.run(listen(server, "encoding=linear16&sample_rate=16000&model=whisper-large"))
    assert code == 1008 and reason.startswith("INVALID_QUERY: model 'whisper-large' does not exist")
    assert [m["type"] for m in messages] == ["Error"]
