"""A stream's own buffered-streaming window, end to end: gRPC StreamingRecognize carries
`decoding.stream_context` (and `decoding.delay`), a /v1/realtime session its transcription's
`stream_context`, to a real server on the NeMo-written unified
(`chunked_limited_with_rc`) fixture; each window's transcript equals the in-process engine's with
the same window, different windows give NeMo's different outputs, and an untrained window is
INVALID_ARGUMENT naming the trained choices. Realtime deltas carry each partial's right-context
tokens as `tentative` text, and the session still completes with the engine's transcript."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from app.audio import pcm16_to_float
from engine import ASREngine, DecodingOptions, EngineConfig
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.e2e.conftest import ServerProcess
from tests.e2e.test_realtime_common import DELTA, TERMINAL, pcm16_at, sdk_session
from tests.engine.nemo.conftest import FIXTURES, clip, reference, start_streaming_server

pytestmark = pytest.mark.slow  # starts a real server

NAME = "unified_rc"
CKPT = FIXTURES / NAME
RATE = 16000
CLIP = "libri_61-70968-0000"
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_streaming_server(Path(tmp_path_factory.mktemp("nemo-rc")), NAME)
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def engine() -> Iterator[ASREngine]:
    eng = ASREngine(EngineConfig(ckpt_dir=str(CKPT)))
    yield eng
    eng.shutdown()


def stream(server: ServerProcess, audio: bytes, decoding: pb.DecodingExtensions) -> str:
    config = pb.StreamingRecognitionConfig(
        config=pb.RecognitionConfig(encoding=pb.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE,
                                    decoding=decoding),
        interim_results=True,
    )  # fmt: skip

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield pb.StreamingRecognizeRequest(streaming_config=config)
        step = RATE * 2 // 5  # 200 ms
        for i in range(0, len(audio), step):
            yield pb.StreamingRecognizeRequest(audio_content=audio[i : i + step])
            time.sleep(0.01)

    with grpc.insecure_channel(server.grpc_target) as channel:
        responses = list(speech_pb2_grpc.SpeechStub(channel).StreamingRecognize(requests(), timeout=TIMEOUT_S))
    finals = [r.results[0] for r in responses if r.results and r.results[0].is_final]
    assert len(finals) == 1
    return str(finals[0].alternatives[0].transcript)


def test_each_stream_runs_with_its_own_window(server: ServerProcess, engine: ASREngine) -> None:
    audio = pcm16_at(clip(NAME, CLIP), RATE)
    samples = pcm16_to_float(audio)
    presets = [tuple(p) for p in engine.info()["stream_settings"]["presets"]]
    assert len(presets) >= 2
    got = {}
    for left, chunk, right in presets[:2]:
        window = pb.StreamContext(left=left, chunk=chunk, right=right)
        got[(left, chunk, right)] = stream(server, audio, pb.DecodingExtensions(stream_context=window))
        want = engine.transcribe(samples, streaming=True,
                                 decoding=DecodingOptions(stream_context=(left, chunk, right)))
        assert got[(left, chunk, right)] == want
    nemo = {(tuple(r["preset"]), r["clip"]): r["tokens"] for r in reference(NAME)["buffered"]}
    recorded = [nemo[(p, CLIP)] for p in presets[:2]]
    assert recorded[0] != recorded[1], "the fixture no longer tells these windows apart; pick two that NeMo does"
    assert len(set(got.values())) == 2, "the server ran both streams with one window"


def test_delay_picks_a_preset(server: ServerProcess, engine: ASREngine) -> None:
    audio = pcm16_at(clip(NAME, CLIP), RATE)
    text = stream(server, audio, pb.DecodingExtensions(delay="minimal"))
    assert text == engine.transcribe(pcm16_to_float(audio), streaming=True, decoding=DecodingOptions(delay="minimal"))


def test_an_untrained_window_is_invalid_argument(server: ServerProcess) -> None:
    audio = pcm16_at(clip(NAME, CLIP), RATE)[: RATE * 2]
    with pytest.raises(grpc.RpcError) as err:
        stream(server, audio, pb.DecodingExtensions(stream_context=pb.StreamContext(left=10, chunk=3, right=3)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not trained" in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        stream(server, audio, pb.DecodingExtensions(delay="instant"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "delay" in (err.value.details() or "")


def test_realtime_sessions_run_with_their_own_window(server: ServerProcess, engine: ASREngine) -> None:
    audio = pcm16_at(clip(NAME, CLIP), RATE)
    samples = pcm16_to_float(audio)
    presets = [tuple(p) for p in engine.info()["stream_settings"]["presets"]][:2]
    got = []
    for window in presets:
        log = asyncio.run(sdk_session(server.ws_url, audio, rate=RATE, transcription={"stream_context": list(window)},
                                      tentative=True))
        assert not log.of_type("error"), log.of_type("error")
        (completed,) = [e for e in log.events if e["type"] == TERMINAL[0]]
        want = engine.transcribe(samples, streaming=True, decoding=DecodingOptions(stream_context=window))
        assert completed["transcript"] == want
        deltas = [e for e in log.events if e["type"] == DELTA]
        assert any(e.get("tentative") for e in deltas), "no delta showed the window's right context as tentative"
        shown = ""  # the item's text as a client assembles it: deltas only append committed text
        for e in deltas:
            shown += e["delta"]
            assert shown == e["committed"]
        got.append(completed["transcript"])
    assert got[0] != got[1], "both sessions ran with one window"


def test_realtime_refuses_an_untrained_window(server: ServerProcess) -> None:
    audio = pcm16_at(clip(NAME, CLIP), RATE)[: RATE * 2]
    log = asyncio.run(sdk_session(server.ws_url, audio, rate=RATE, transcription={"stream_context": [10, 3, 3]}))
    (error,) = log.of_type("error")
    assert error["error"]["code"] == "invalid_value" and "not trained" in error["error"]["message"]
