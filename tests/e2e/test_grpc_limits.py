"""gRPC under the server's limits, end to end on one real server started with an API key,
`--max-inflight 1`, a served model name, a short stream idle timeout and a short shutdown grace:
authentication, capacity, the model name, idle streams, the client's deadline, and a SIGTERM drain (health flips to NOT_SERVING for watchers, in-flight work finishes or gets
UNAVAILABLE, exit code 0)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.audio_variants import encode_variant
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_grpc import (
    FILE_CLIP,
    LONG_CLIP,
    SERVICE,
    clip_bytes,
    clip_row,
    clip_samples,
    metric_value,
    wer,
)

KEY = "grpc-test-key"
GRACE_S = 15
IDLE_S = 5  # stream idle timeout: long enough for the capacity test's held stream
MODEL = "oasr-tiny"
AUTH = (("authorization", f"Bearer {KEY}"),)
TIMEOUT_S = 120.0
Enc = pb.RecognitionConfig.AudioEncoding


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("grpc-limits"), env={
        "OASR_API_KEY": KEY, "OASR_MAX_INFLIGHT": "1", "OASR_SHUTDOWN_GRACE_SECS": str(GRACE_S),
        "OASR_STREAM_IDLE_TIMEOUT_SECS": str(IDLE_S), "OASR_SERVED_MODEL_NAME": MODEL})
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_target) as ch:
        grpc.channel_ready_future(ch).result(timeout=30)
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> speech_pb2_grpc.SpeechStub:
    return speech_pb2_grpc.SpeechStub(channel)


def recognize(audio: bytes) -> pb.RecognizeRequest:
    return pb.RecognizeRequest(config=pb.RecognitionConfig(), audio=pb.RecognitionAudio(content=audio))


def wait_inflight(server: ServerProcess, n: int, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        ready: dict[str, Any] = httpx.get(f"{server.base_url}/readyz", timeout=10).json()
        if ready["inflight"] == n and (n or ready["running"] == 0):
            return ready
        assert time.monotonic() < deadline, ready
        time.sleep(0.05)


@pytest.mark.parametrize("metadata", [None, (("authorization", "Bearer wrong"),), (("x-api-key", "nope"),)])
def test_missing_or_wrong_key_is_unauthenticated(stub: speech_pb2_grpc.SpeechStub, metadata: Any) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.Recognize(recognize(b"x"), metadata=metadata, timeout=TIMEOUT_S)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "API key" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        list(stub.StreamingRecognize(iter([pb.StreamingRecognizeRequest()]), metadata=metadata, timeout=TIMEOUT_S))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("metadata", [AUTH, (("x-api-key", KEY),)])
def test_right_key_is_served_and_health_needs_none(stub: speech_pb2_grpc.SpeechStub, channel: grpc.Channel,
                                                   metadata: Any) -> None:
    resp = stub.Recognize(recognize(clip_bytes(FILE_CLIP)), metadata=metadata, timeout=TIMEOUT_S)
    assert wer(clip_row(FILE_CLIP)["text"], resp.results[0].alternatives[0].transcript) <= 15.0
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_at_capacity_is_resource_exhausted(stub: speech_pb2_grpc.SpeechStub, server: ServerProcess) -> None:
    """A stream holds the only permit while open; a second call is refused, not queued."""
    release = threading.Event()

    def held_stream() -> Iterator[pb.StreamingRecognizeRequest]:
        config = pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=16000)
        yield pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(config=config))
        yield pb.StreamingRecognizeRequest(audio_content=b"\x00\x01" * 16000)
        release.wait(TIMEOUT_S)

    busy = metric_value(server, "oasr_requests_busy_total", api_key=KEY)
    call = stub.StreamingRecognize(held_stream(), metadata=AUTH, timeout=TIMEOUT_S)
    try:
        wait_inflight(server, 1)
        with pytest.raises(grpc.RpcError) as err:
            stub.Recognize(recognize(clip_bytes(FILE_CLIP)), metadata=AUTH, timeout=TIMEOUT_S)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "capacity" in err.value.details()
        assert metric_value(server, "oasr_requests_busy_total", api_key=KEY) == busy + 1
    finally:
        release.set()
    assert [r.results[0].is_final for r in call] == [True]  # 1 s of near-silence: recognized all the same
    wait_inflight(server, 0)


def test_unknown_model_is_not_found(stub: speech_pb2_grpc.SpeechStub) -> None:
    request = pb.RecognizeRequest(config=pb.RecognitionConfig(model="whisper-large-v9"),
                                  audio=pb.RecognitionAudio(content=clip_bytes(FILE_CLIP)))
    with pytest.raises(grpc.RpcError) as err:
        stub.Recognize(request, metadata=AUTH, timeout=TIMEOUT_S)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and MODEL in err.value.details()
    request.config.model = MODEL
    assert stub.Recognize(request, metadata=AUTH, timeout=TIMEOUT_S).results


def test_idle_stream_is_closed(stub: speech_pb2_grpc.SpeechStub, server: ServerProcess) -> None:
    stop = threading.Event()

    def silent_client() -> Iterator[pb.StreamingRecognizeRequest]:
        config = pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=16000)
        yield pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(config=config))
        yield pb.StreamingRecognizeRequest(audio_content=b"\x00\x00" * 1600)
        stop.wait(TIMEOUT_S)  # then nothing, without half-closing

    started = time.monotonic()
    try:
        with pytest.raises(grpc.RpcError) as err:
            list(stub.StreamingRecognize(silent_client(), metadata=AUTH, timeout=TIMEOUT_S))
    finally:
        stop.set()
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "--stream-idle-timeout-secs" in err.value.details()
    assert IDLE_S <= time.monotonic() - started < IDLE_S + 10
    wait_inflight(server, 0)


def test_client_deadline_ends_the_call_and_the_engine_request(stub: speech_pb2_grpc.SpeechStub,
                                                              server: ServerProcess) -> None:
    # the 52 s clip four times over: seven windows decoded one after the other take far longer
    # than the deadline even on a fast CPU, so the deadline always falls mid-recognition
    tiled = encode_variant(np.tile(clip_samples(LONG_CLIP, 16000), 4), 16000, "flac")
    with pytest.raises(grpc.RpcError) as err:
        stub.Recognize(recognize(tiled), metadata=AUTH, timeout=1.5)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_inflight(server, 0)  # the server gave up too, instead of decoding all 210 s


def test_sigterm_drains(stub: speech_pb2_grpc.SpeechStub, channel: grpc.Channel, server: ServerProcess) -> None:
    """Last in the module: the server exits. The in-flight call finishes within the grace, and an
    open health Watch (which never ends by itself) does not hold the exit for the whole grace."""
    health = health_pb2_grpc.HealthStub(channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=TIMEOUT_S)
    wait_inflight(server, 0)
    # readiness (and so health) may still be recovering from the long decode of the test before
    while next(watch).status != health_pb2.HealthCheckResponse.SERVING:
        pass
    call = stub.Recognize.future(recognize(clip_bytes(FILE_CLIP)), metadata=AUTH, timeout=TIMEOUT_S)
    wait_inflight(server, 1)
    signalled = time.monotonic()
    server.proc.send_signal(15)
    assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError):  # new calls are refused while draining
        stub.Recognize(recognize(clip_bytes(FILE_CLIP)), metadata=AUTH, timeout=10)
    resp = call.result()
    assert wer(clip_row(FILE_CLIP)["text"], resp.results[0].alternatives[0].transcript) <= 15.0
    assert server.proc.wait(timeout=60) == 0
    assert time.monotonic() - signalled < GRACE_S
