"""Must-show 5, end to end: a real server started on a generated WeNet streaming checkpoint
serves /v1/realtime (raw WebSocket client) and gRPC StreamingRecognize (real grpcio stub)
with partials before the audio ends, and each final transcript equals what the in-process
engine makes of the same audio. The random-init model's words are meaningless, but they
are deterministic, so equality is a real check of the whole path (PCM in, chunked runtime,
outputs out)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import websockets

from app.audio import pcm16_to_float
from engine import ASREngine, EngineConfig
from engine.models.wenet.testing import write_checkpoint
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.conftest import load_clip
from tests.e2e.conftest import ServerProcess, start_server

pytestmark = pytest.mark.slow  # starts a real server (model load, grpc + uvicorn)

RATE = 16000  # Hz, sent as-is so the server does not resample
CHUNK_MS = 100
CLIP = "libri_61-70968-0000"
TIMEOUT_S = 120.0


def pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = write_checkpoint(str(tmp_path_factory.mktemp("wenet-e2e") / "ckpt"))
    # experiment-dir layout: a lone .pt would be claimed by the Whisper family's detection
    shutil.copy(os.path.join(path, "final.pt"), os.path.join(path, "avg.pt"))
    return path


@pytest.fixture(scope="module")
def server(ckpt: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(Path(tmp_path_factory.mktemp("wenet-server")),
                       env={"OASR_CKPT_DIR": ckpt, "OASR_SERVICE_MODE": "streaming"})  # fmt: skip
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def in_process_text(ckpt: str) -> str:
    """What the engine in this process makes of the PCM16 the clients send."""
    eng = ASREngine(EngineConfig(ckpt_dir=ckpt, service_mode="streaming"))
    try:
        out = eng.transcribe_outputs(pcm16_to_float(pcm16(load_clip(CLIP))))[0]
    finally:
        eng.shutdown()
    assert out.finish_reason == "stop" and out.text
    return out.text


async def realtime_session(server: ServerProcess, audio: bytes) -> tuple[list[dict], float]:
    """One manual-commit session; events are read (and timestamped) while audio is sent."""
    url = server.ws_url + "/v1/realtime?intent=transcription"
    events: list[dict] = []
    arrived: dict[str, asyncio.Event] = {}

    def waiter(kind: str) -> asyncio.Event:
        return arrived.setdefault(kind, asyncio.Event())

    async with websockets.connect(url, max_size=None) as ws:

        async def read() -> None:
            async for message in ws:
                event = json.loads(message)
                events.append({**event, "_t": time.monotonic()})
                waiter(event["type"]).set()

        reader = asyncio.create_task(read())
        await asyncio.wait_for(waiter("session.created").wait(), TIMEOUT_S)
        await ws.send(
            json.dumps(
                {
                    "type": "session.update",
                    "session": {
                        "type": "transcription",
                        "audio": {
                            "input": {"format": {"type": "audio/pcm", "rate": RATE}, "turn_detection": None}
                        },
                    },
                }
            )
        )
        await asyncio.wait_for(waiter("session.updated").wait(), TIMEOUT_S)
        step = RATE * 2 * CHUNK_MS // 1000
        for i in range(0, len(audio), step):
            await ws.send(
                json.dumps(
                    {
                        "type": "input_audio_buffer.append",
                        "audio": base64.b64encode(audio[i : i + step]).decode(),
                    }
                )
            )
            await asyncio.sleep(CHUNK_MS / 1000 / 2)  # twice real time
        sent_all = time.monotonic()
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        done = "conversation.item.input_audio_transcription.completed"
        await asyncio.wait_for(waiter(done).wait(), TIMEOUT_S)
        reader.cancel()
    return events, sent_all


def test_realtime_websocket_matches_in_process_engine(server: ServerProcess, in_process_text: str) -> None:
    events, sent_all = asyncio.run(realtime_session(server, pcm16(load_clip(CLIP))))
    deltas = [e for e in events if e["type"] == "conversation.item.input_audio_transcription.delta"]
    completed = [e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert len(completed) == 1 and completed[0]["transcript"] == in_process_text
    assert any(d.get("delta") and d["_t"] < sent_all for d in deltas), "no partial before the audio ended"
    assert (
        "".join(d.get("delta", "") for d in deltas)
        == in_process_text[: len("".join(d.get("delta", "") for d in deltas))]
    )


def test_grpc_streaming_matches_in_process_engine(server: ServerProcess, in_process_text: str) -> None:
    audio = pcm16(load_clip(CLIP))
    config = pb.StreamingRecognitionConfig(
        config=pb.RecognitionConfig(
            encoding=pb.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE
        ),
        interim_results=True,
    )
    sent_all: list[float] = []

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield pb.StreamingRecognizeRequest(streaming_config=config)
        step = RATE * 2 * CHUNK_MS // 1000
        for i in range(0, len(audio), step):
            yield pb.StreamingRecognizeRequest(audio_content=audio[i : i + step])
            time.sleep(CHUNK_MS / 1000 / 2)
        sent_all.append(time.monotonic())

    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = speech_pb2_grpc.SpeechStub(channel)
        responses = [(time.monotonic(), r) for r in stub.StreamingRecognize(requests(), timeout=TIMEOUT_S)]
    results = [(t, r.results[0]) for t, r in responses if r.results]
    partials = [(t, r) for t, r in results if not r.is_final]
    finals = [r for _, r in results if r.is_final]
    assert len(finals) == 1 and finals[0].alternatives[0].transcript == in_process_text
    assert partials and partials[0][0] < sent_all[0], "no interim result before the audio ended"
