"""Fault (a) of issue 35: the engine thread dies. A real server on a fake-family checkpoint whose
runner raises from `execute()` once a request has heard 2 s of audio (engine/models/fake.py), so an
exception escapes `step()` on the real engine thread while a live gRPC stream is in flight: every
open request ends with UNAVAILABLE, readiness is false from then on, and the process exits with
ENGINE_DIED_EXIT_CODE for Kubernetes to restart it (docs/operations.md)."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import soundfile as sf

from app.engine_service import ENGINE_DIED_EXIT_CODE
from engine.models.fake import write_checkpoint
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.e2e.conftest import start_server

RATE = 16000  # Hz, the fake family's rate
FAIL_AT_S = 2.0  # audio a request may hear before the checkpoint's runner raises
EXIT_WAIT_S = 60.0


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)  # 'loud' frames for the fake family


class LiveStream:
    """A gRPC StreamingRecognize that sends 0.5 s and holds the stream open, in a thread."""

    def __init__(self, target: str):
        self.first_result = threading.Event()
        self.release = threading.Event()
        self.error: grpc.RpcError | None = None
        self.finals = 0
        self._thread = threading.Thread(target=self._run, args=(target,), daemon=True)
        self._thread.start()

    def _requests(self) -> Iterator[pb.StreamingRecognizeRequest]:
        config = pb.RecognitionConfig(encoding=pb.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE)
        yield pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(
            config=config, interim_results=True))
        yield pb.StreamingRecognizeRequest(audio_content=(tone(0.5) * 32767).astype("<i2").tobytes())
        self.release.wait(EXIT_WAIT_S)  # a live microphone: more may come

    def _run(self, target: str) -> None:
        with grpc.insecure_channel(target) as channel:
            try:
                for response in speech_pb2_grpc.SpeechStub(channel).StreamingRecognize(self._requests(), timeout=120):
                    if response.results:
                        self.first_result.set()
                        self.finals += sum(r.is_final for r in response.results)
            except grpc.RpcError as exc:
                self.error = exc
            finally:
                self.first_result.set()
                self.release.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def test_a_dying_engine_thread_ends_every_request_unavailable_and_exits_non_zero(tmp_path: Path) -> None:
    ckpt = write_checkpoint(str(tmp_path / "ckpt"), fail_at_audio_seconds=FAIL_AT_S)
    server = start_server(tmp_path, env={"OASR_CKPT_DIR": ckpt, "OASR_SERVICE_MODE": "streaming"})
    live = LiveStream(server.grpc_target)
    try:
        assert live.first_result.wait(60) and live.error is None  # in flight: a partial came back
        buf = io.BytesIO()
        sf.write(buf, tone(3 * FAIL_AT_S), RATE, format="WAV", subtype="PCM_16")
        r = httpx.post(f"{server.base_url}/v1/speech:recognize", params={"encoding": "AUTO"},
                       content=buf.getvalue(), timeout=60)  # this request's step raises
        assert r.status_code == 503, r.text
        assert r.json()["error"]["status"] == "UNAVAILABLE", r.text
        with contextlib.suppress(httpx.TransportError):  # or the server is already gone
            assert httpx.get(f"{server.base_url}/readyz", timeout=5).status_code == 503
        live.join(EXIT_WAIT_S)
        assert live.error is not None and live.error.code() is grpc.StatusCode.UNAVAILABLE, live.error
        assert live.finals == 0
        deadline = time.monotonic() + EXIT_WAIT_S
        while server.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.proc.returncode == ENGINE_DIED_EXIT_CODE, server.log()[-3000:]
        log = server.log()
        assert "engine thread died: InjectedFault" in log and "Traceback" in log  # the cause, for the operator
    finally:
        live.release.set()
        server.terminate()


@pytest.mark.slow
def test_the_engine_of_any_model_dying_exits_the_server(tmp_path: Path) -> None:
    """Several models (OASR_MODELS): the second model's engine thread dies on its first request;
    that request ends UNAVAILABLE and the whole server exits with ENGINE_DIED_EXIT_CODE, as for one."""
    ckpt = write_checkpoint(str(tmp_path / "ckpt"), fail_at_audio_seconds=FAIL_AT_S)
    server = start_server(tmp_path, env={"OASR_MODELS": f"tiny.en,faulty={ckpt}"})
    try:
        buf = io.BytesIO()
        sf.write(buf, tone(3 * FAIL_AT_S), RATE, format="WAV", subtype="PCM_16")
        r = httpx.post(f"{server.base_url}/v1/speech:recognize", params={"encoding": "AUTO", "model": "faulty"},
                       content=buf.getvalue(), timeout=60)
        assert r.status_code == 503 and r.json()["error"]["status"] == "UNAVAILABLE", r.text
        deadline = time.monotonic() + EXIT_WAIT_S
        while server.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.proc.returncode == ENGINE_DIED_EXIT_CODE, server.log()[-3000:]
        assert "engine thread died: InjectedFault" in server.log()
    finally:
        server.terminate()
