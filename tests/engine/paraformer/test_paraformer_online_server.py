"""End to end: a real server in streaming mode on the FunASR-written paraformer-online checkpoint
serves a realtime session (the official SDK's client, manual commit), gRPC StreamingRecognize and
Deepgram's /v1/listen with partials while the audio is still coming and a final transcript equal
to the in-process engine's streaming output on the same PCM16 samples; `/v1/models` declares it
streaming."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import websockets

from app.audio import pcm16_to_float
from engine import ASREngine, EngineConfig
from engine.types import RequestOutput
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_realtime_common import DELTA, TERMINAL, check_session_events, pcm16_at, sdk_session
from tests.engine.paraformer.conftest import FIXTURES, clip

pytestmark = pytest.mark.slow  # starts a real server

ONLINE_CKPT = FIXTURES / "online"
RATE = 16000  # Hz: sent as-is, so no resampler stands between the server and the in-process engine
CLIP = "libri_61-70968-0000"  # about 5 s: eight 600 ms chunks
CHUNK_MS = 40
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(Path(tmp_path_factory.mktemp("paraformer-online-server")),
                       env={"OASR_CKPT_DIR": str(ONLINE_CKPT), "OASR_SERVICE_MODE": "streaming"})  # fmt: skip
    yield srv
    srv.terminate()


def stream_in_process(audio: np.ndarray) -> RequestOutput:
    """The in-process engine's streaming output on these samples."""
    eng = ASREngine(EngineConfig(ckpt_dir=str(ONLINE_CKPT), service_mode="streaming"))
    try:
        (out,) = eng.transcribe_outputs(audio, streaming=True)
    finally:
        eng.shutdown()
    assert out.finish_reason == "stop" and out.text
    return out


@pytest.fixture(scope="module")
def expected() -> RequestOutput:
    """On the PCM16 the clients send."""
    return stream_in_process(pcm16_to_float(pcm16_at(clip(CLIP), RATE)))


def test_models_card_declares_streaming(server: ServerProcess) -> None:
    (card,) = httpx.get(f"{server.base_url}/v1/models", timeout=TIMEOUT_S).json()["data"]
    info = card["info"]
    assert info["family"] == "paraformer" and info["streaming"] is True
    assert info["chunk_size"] == [0, 10, 5] and info["chunk_ms"] == 600


def test_realtime_session_streams_deltas_and_the_engines_final(server: ServerProcess, expected: RequestOutput) -> None:
    # hold the last 2 s until a delta arrived: partials come while the audio is still coming
    log = asyncio.run(sdk_session(server.ws_url, pcm16_at(clip(CLIP), RATE), rate=RATE, chunk_ms=CHUNK_MS,
                                  hold_at_s=3.0, timeout=TIMEOUT_S))  # fmt: skip
    check_session_events(log.events)
    deltas = [e for e in log.events if e["type"] == DELTA]
    completed = [e for e in log.events if e["type"] == TERMINAL[0]]
    assert len(completed) == 1 and completed[0]["transcript"] == expected.text
    assert len([d for d in deltas if d.get("delta")]) >= 3
    # each delta extends the text so far, or restates it whole when its last word was revised
    text = ""
    for d in deltas:
        text = d["text"] if d.get("text") is not None else text + d.get("delta", "")
    assert expected.text.startswith(text[: len(text) - len(text.split(" ")[-1])])


def test_grpc_streaming_recognize_interim_and_final(server: ServerProcess, expected: RequestOutput) -> None:
    audio = pcm16_at(clip(CLIP), RATE)
    config = pb.StreamingRecognitionConfig(
        config=pb.RecognitionConfig(encoding=pb.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE),
        interim_results=True,
    )
    sent_all: list[float] = []

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield pb.StreamingRecognizeRequest(streaming_config=config)
        step = RATE * 2 * CHUNK_MS // 1000
        for i in range(0, len(audio), step):
            yield pb.StreamingRecognizeRequest(audio_content=audio[i : i + step])
            time.sleep(CHUNK_MS / 1000 / 2)  # twice real time
        sent_all.append(time.monotonic())

    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = speech_pb2_grpc.SpeechStub(channel)
        responses = [(time.monotonic(), r) for r in stub.StreamingRecognize(requests(), timeout=TIMEOUT_S)]
    results = [(t, r.results[0]) for t, r in responses if r.results]
    partials = [(t, r) for t, r in results if not r.is_final]
    finals = [r for _, r in results if r.is_final]
    assert len(finals) == 1 and finals[0].alternatives[0].transcript == expected.text
    assert partials and partials[0][0] < sent_all[0], "no interim result before the audio ended"


def test_deepgram_listen_interim_and_final(server: ServerProcess) -> None:
    audio = pcm16_at(clip(CLIP), RATE)

    async def run() -> list[dict]:
        url = f"{server.ws_url}/v1/listen?encoding=linear16&sample_rate={RATE}&interim_results=true"
        messages = []
        async with websockets.connect(url, max_size=None) as ws:
            step = RATE * 2 * CHUNK_MS // 1000
            for i in range(0, len(audio), step):
                await ws.send(audio[i : i + step])
                await asyncio.sleep(CHUNK_MS / 1000 / 2)  # twice real time
            await ws.send(json.dumps({"type": "CloseStream"}))
            try:
                while True:
                    messages.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
            except websockets.ConnectionClosed:
                pass
        return messages

    results = [m for m in asyncio.run(run()) if m["type"] == "Results"]
    finals = [m for m in results if m["is_final"]]
    # the server's VAD cuts the segment from the speech start to its end (plus paddings): the
    # stream holds that audio only, so the in-process reference takes the same span
    assert len(finals) == 1
    start = round(finals[0]["start"] * RATE)
    end = round((finals[0]["start"] + finals[0]["duration"]) * RATE)
    expected = stream_in_process(pcm16_to_float(audio)[start:end])
    assert finals[0]["channel"]["alternatives"][0]["transcript"] == expected.text
    assert any(not m["is_final"] for m in results), "no interim results while the audio streamed"
