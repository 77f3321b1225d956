"""Every live surface streams a Zipformer model, end to end: a real streaming-mode server on the
icefall-written fixture serves /v1/realtime to the official `openai` SDK's realtime client,
gRPC StreamingRecognize, and Deepgram's /v1/listen to a raw websocket client; each transcript
equals what the in-process engine makes of the same samples (the random-weight model's words
are meaningless but deterministic, so equality checks the whole path: PCM in, fbank, chunked
encoder with slot caches, batched greedy decoding, text out). /v1/models declares the model's
capabilities and chunk settings."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import websockets

from app.audio import pcm16_to_float
from engine import ASREngine, EngineConfig
from engine.types import DecodingOptions, RequestOutput
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_realtime_common import (
    COMMITTED,
    DELTA,
    TERMINAL,
    check_session_events,
    pcm16_at,
    sdk_session,
)
from tests.engine.zipformer.conftest import CHECKPOINT, clip

pytestmark = pytest.mark.slow  # starts a real server

RATE = 16000  # Hz: sent as-is, so no resampler stands between the server and the in-process engine
CLIP = "libri_61-70968-0000"
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(Path(tmp_path_factory.mktemp("zipformer-server")),
                       env={"OASR_CKPT_DIR": str(CHECKPOINT), "OASR_SERVICE_MODE": "streaming",
                            "OASR_NUM_THREADS": "1", "OASR_ZIPFORMER_LANGUAGE": "en"})  # fmt: skip  # the tiny model is per-op overhead
    yield srv
    srv.terminate()


def stream_in_process(audio: np.ndarray) -> RequestOutput:
    """The in-process engine's streamed output on `audio`."""
    eng = ASREngine(EngineConfig(ckpt_dir=str(CHECKPOINT), service_mode="streaming", num_threads=1))
    try:
        rid = eng.add_streaming_request()
        eng.feed_chunk(rid, audio, is_last=True)
        outs: list[RequestOutput] = []
        while not (outs and outs[-1].finished):
            outs += [o for o in eng.step() if o.request_id == rid]
    finally:
        eng.shutdown()
    assert outs[-1].finish_reason == "stop" and outs[-1].text
    return outs[-1]


@pytest.fixture(scope="module")
def streamed() -> RequestOutput:
    """The in-process engine's streamed output on the PCM16 the clients send."""
    return stream_in_process(pcm16_to_float(pcm16_at(clip(CLIP), RATE)))


def test_openai_sdk_realtime_session(server: ServerProcess, streamed: RequestOutput) -> None:
    log = asyncio.run(sdk_session(server.ws_url, pcm16_at(clip(CLIP), RATE), rate=RATE, hold_at_s=1.0))
    check_session_events(log.events)
    completed = [e for e in log.events if e["type"] == TERMINAL[0]]
    assert len(log.of_type(COMMITTED)) == 1 and len(completed) == 1
    assert completed[0]["transcript"] == streamed.text
    deltas = log.of_type(DELTA)
    assert len(deltas) > 1, "no partial transcripts while the audio streamed"
    assert streamed.text.startswith("".join(d["delta"] for d in deltas))


def test_grpc_streaming_recognize(server: ServerProcess, streamed: RequestOutput) -> None:
    audio = pcm16_at(clip(CLIP), RATE)
    config = pb.StreamingRecognitionConfig(
        config=pb.RecognitionConfig(encoding=pb.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE),
        interim_results=True,
    )

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield pb.StreamingRecognizeRequest(streaming_config=config)
        step = RATE * 2 // 10  # 100 ms of PCM16
        for i in range(0, len(audio), step):
            yield pb.StreamingRecognizeRequest(audio_content=audio[i : i + step])
            time.sleep(0.02)

    with grpc.insecure_channel(server.grpc_target) as channel:
        responses = list(speech_pb2_grpc.SpeechStub(channel).StreamingRecognize(requests(), timeout=TIMEOUT_S))
    results = [r.results[0] for r in responses if r.results]
    finals = [r for r in results if r.is_final]
    assert len(finals) == 1 and finals[0].alternatives[0].transcript == streamed.text
    assert any(not r.is_final for r in results)


def test_deepgram_listen(server: ServerProcess) -> None:
    audio = pcm16_at(clip(CLIP), RATE)

    async def run() -> list[dict[str, Any]]:
        url = f"{server.ws_url}/v1/listen?encoding=linear16&sample_rate={RATE}&interim_results=true&punctuate=true"
        messages = []
        async with websockets.connect(url, max_size=None) as ws:
            step = RATE * 2 // 10  # 100 ms
            for i in range(0, len(audio), step):
                await ws.send(audio[i : i + step])
                await asyncio.sleep(0.02)
            await ws.send(json.dumps({"type": "CloseStream"}))
            try:
                while True:
                    messages.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
            except websockets.ConnectionClosed:
                pass
        return messages

    messages = asyncio.run(run())
    results = [m for m in messages if m["type"] == "Results"]
    finals = [m for m in results if m["is_final"]]
    # The server VAD cuts the segment from the speech start to its end (plus paddings): the
    # engine's stream holds that audio only, so the in-process reference takes the same span.
    assert len(finals) == 1
    start = round(finals[0]["start"] * RATE)
    end = round((finals[0]["start"] + finals[0]["duration"]) * RATE)
    expected = stream_in_process(pcm16_to_float(audio)[start:end])
    assert finals[0]["channel"]["alternatives"][0]["transcript"] == expected.text
    assert any(not m["is_final"] for m in results), "no interim results while the audio streamed"
    assert messages[-1]["type"] == "Metadata"


def test_models_endpoint_declares_capabilities(server: ServerProcess) -> None:
    info = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"][0]["info"]
    assert info["family"] == "zipformer" and info["decode_methods"] == ["greedy_search"]
    assert info["languages"] == ["en"]  # OASR_ZIPFORMER_LANGUAGE: icefall checkpoints do not record it
    caps = info["capabilities"]
    assert caps["word_timestamps"] and caps["logprobs"]
    assert (caps["max_beam_size"], caps["max_n_best"]) == (16, 16) and caps["keywords"] and not caps["stream_context"]
    settings = info["stream_settings"]
    assert settings["style"] == "chunked" and (settings["chunk_size"], settings["left_context_frames"]) == (16, 64)
    assert settings["trained_chunk_sizes"] == [16, 32, 64]


def test_google_recognize_alternatives_are_the_beam_nbest(server: ServerProcess) -> None:
    """max_alternatives asks for the n-best of a beam search: the server's alternatives are the
    in-process modified beam search's n-best on the same samples, in order."""
    pcm = pcm16_at(clip(CLIP), RATE)
    r = httpx.post(f"{server.base_url}/v1/speech:recognize", content=pcm, timeout=TIMEOUT_S,
                   params={"encoding": "linear16", "sample_rate": RATE, "max_alternatives": 4})  # fmt: skip
    assert r.status_code == 200, r.text
    alternatives = [a["transcript"] for res in r.json()["results"] for a in res["alternatives"]]
    eng = ASREngine(EngineConfig(ckpt_dir=str(CHECKPOINT), num_threads=1))
    try:
        out = eng.transcribe_outputs(pcm16_to_float(pcm), decoding=DecodingOptions(beam_size=4, n_best=4))[0]
    finally:
        eng.shutdown()
    assert len(out.nbest) == 4
    assert alternatives == [a.text for a in out.nbest]
