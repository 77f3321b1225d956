"""Must-show 5, end to end: a real server started on the NeMo-written cache-aware fixture serves
/v1/realtime to the official `openai` SDK's realtime client (deltas while the audio streams, one
completed transcript), gRPC StreamingRecognize and the OpenAI file API; each transcript equals
what the in-process engine makes of the same samples (the random-weight model's words are
meaningless but deterministic, so equality checks the whole path: PCM in, cache-aware chunks,
pooled caches, batched decoding, text out)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from app.audio import pcm16_to_float
from engine import ASREngine, EngineConfig
from engine.types import DecodingOptions, RequestOutput
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.e2e.conftest import ServerProcess
from tests.e2e.test_realtime_common import (
    COMMITTED,
    DELTA,
    TERMINAL,
    check_session_events,
    pcm16_at,
    sdk_session,
)
from tests.engine.nemo.conftest import FIXTURES, clip, start_streaming_server

pytestmark = pytest.mark.slow  # starts a real server

RATE = 16000  # Hz: sent as-is, so no resampler stands between the server and the in-process engine
CLIP = "libri_61-70968-0000"
CKPT = FIXTURES / "hybrid_cache_aware"
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_streaming_server(Path(tmp_path_factory.mktemp("nemo-server")), "hybrid_cache_aware")
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def in_process() -> tuple[RequestOutput, RequestOutput]:
    """(streamed, offline) outputs of the engine in this process on the PCM16 the clients send."""
    audio = pcm16_to_float(pcm16_at(clip("hybrid_cache_aware", CLIP), RATE))
    eng = ASREngine(EngineConfig(ckpt_dir=str(CKPT), service_mode="streaming"))
    try:
        rid = eng.add_streaming_request()
        eng.feed_chunk(rid, audio, is_last=True)
        outs: list[RequestOutput] = []
        while not (outs and outs[-1].finished):
            outs += [o for o in eng.step() if o.request_id == rid]
        offline = eng.transcribe_outputs(audio)[0]
    finally:
        eng.shutdown()
    assert outs[-1].finish_reason == "stop" and outs[-1].text and offline.text
    return outs[-1], offline


def test_openai_sdk_realtime_session(server: ServerProcess, in_process: tuple[RequestOutput, RequestOutput]) -> None:
    streamed, _ = in_process
    log = asyncio.run(sdk_session(server.ws_url, pcm16_at(clip("hybrid_cache_aware", CLIP), RATE), rate=RATE, hold_at_s=1.0))
    check_session_events(log.events)
    deltas = log.of_type(DELTA)
    completed = [e for e in log.events if e["type"] == TERMINAL[0]]
    assert len(log.of_type(COMMITTED)) == 1 and len(completed) == 1
    assert completed[0]["transcript"] == streamed.text
    assert len(deltas) > 1, "no partial transcripts while the audio streamed"
    joined = "".join(d["delta"] for d in deltas)
    assert streamed.text.startswith(joined)


def test_grpc_streaming_recognize(server: ServerProcess, in_process: tuple[RequestOutput, RequestOutput]) -> None:
    streamed, _ = in_process
    audio = pcm16_at(clip("hybrid_cache_aware", CLIP), RATE)
    config = pb.StreamingRecognitionConfig(
        config=pb.RecognitionConfig(encoding=pb.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE),
        interim_results=True,
    )

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield pb.StreamingRecognizeRequest(streaming_config=config)
        step = RATE * 2 // 10  # 100 ms
        for i in range(0, len(audio), step):
            yield pb.StreamingRecognizeRequest(audio_content=audio[i : i + step])
            time.sleep(0.02)

    with grpc.insecure_channel(server.grpc_target) as channel:
        responses = list(speech_pb2_grpc.SpeechStub(channel).StreamingRecognize(requests(), timeout=TIMEOUT_S))
    results = [r.results[0] for r in responses if r.results]
    finals = [r for r in results if r.is_final]
    assert len(finals) == 1 and finals[0].alternatives[0].transcript == streamed.text
    assert any(not r.is_final for r in results)


def test_openai_file_api(server: ServerProcess, in_process: tuple[RequestOutput, RequestOutput]) -> None:
    import io

    import soundfile as sf

    _, offline = in_process
    buf = io.BytesIO()
    sf.write(buf, pcm16_to_float(pcm16_at(clip("hybrid_cache_aware", CLIP), RATE)), RATE, format="WAV", subtype="PCM_16")
    r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", files={"file": ("a.wav", buf.getvalue())},
                   data={"response_format": "verbose_json", "timestamp_granularities[]": "word"}, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert r.json()["text"] == offline.text


def test_models_endpoint_shows_the_family(server: ServerProcess) -> None:
    info = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"][0]["info"]
    assert info["family"] == "nemo" and info["decode_methods"] == ["rnnt", "ctc"]
    assert [la["chunk_ms"] for la in info["stream_settings"]["look_aheads"]] == [320, 160, 80]
    assert info["stream_settings"]["style"] == "cache_aware"


def test_grpc_streaming_alternatives_are_the_streamed_beam_nbest(server: ServerProcess) -> None:
    """A live stream asking for alternatives beam-searches (malsd_batch) as it streams: the final
    result's alternatives are the in-process stream's n-best on the same samples, in order."""
    audio = pcm16_at(clip("hybrid_cache_aware", CLIP), RATE)
    recognition = pb.RecognitionConfig(encoding=pb.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE,
                                       max_alternatives=3)  # fmt: skip
    config = pb.StreamingRecognitionConfig(config=recognition)

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield pb.StreamingRecognizeRequest(streaming_config=config)
        step = RATE * 2 // 10  # 100 ms
        for i in range(0, len(audio), step):
            yield pb.StreamingRecognizeRequest(audio_content=audio[i : i + step])

    with grpc.insecure_channel(server.grpc_target) as channel:
        responses = list(speech_pb2_grpc.SpeechStub(channel).StreamingRecognize(requests(), timeout=TIMEOUT_S))
    finals = [r.results[0] for r in responses if r.results and r.results[0].is_final]
    eng = ASREngine(EngineConfig(ckpt_dir=str(FIXTURES / "hybrid_cache_aware"), service_mode="streaming",
                                 num_threads=1))  # fmt: skip
    try:
        rid = eng.add_streaming_request(decoding=DecodingOptions(beam_size=3, n_best=3))
        eng.feed_chunk(rid, pcm16_to_float(audio), is_last=True)
        outs: list[RequestOutput] = []
        while not (outs and outs[-1].finished):
            outs += [o for o in eng.step() if o.request_id == rid]
    finally:
        eng.shutdown()
    assert len(outs[-1].nbest) == 3
    assert len(finals) == 1 and [a.transcript for a in finals[0].alternatives] == [a.text for a in outs[-1].nbest]
