"""The gRPC surface end to end: real grpcio stubs against a real `uvicorn --factory app.main:create_app` (offline
mode, embedded Whisper tiny.en) — Recognize in every encoding family, StreamingRecognize with
the stream buffered to half-close, health, reflection, errors, and a cancelled call.

Recognitions are fired together from module fixtures (one engine batch instead of a queue of
single calls); each test then checks one answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import soundfile as sf
import soxr
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from prometheus_client.parser import text_string_to_metric_families

from app.google.wire import google_request_id
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.audio_variants import encode_variant
from tests.e2e.conftest import ServerProcess
from tests.paths import SPEECH_DATA

DATA_DIR = SPEECH_DATA
SERVICE = "oasr.speech.v1.Speech"
FILE_CLIP = "jfk_inaugural"  # 11 s, 44.1 kHz stereo FLAC: sent exactly as stored
VARIANT_CLIP = "libri_61-70968-0000"  # 4.9 s read speech, re-encoded per test
LONG_CLIP = "mfa_michaelandsickmichael"  # 52 s: long enough to cancel mid-recognition
MAX_WER = 15.0  # percent; tiny.en is near 0 on both clips, 8 kHz G.711 costs a few words
TIMEOUT_S = 120.0  # per call: generous for a loaded 2-core box, never unbounded
CHUNK_MS = 100
Enc = pb.RecognitionConfig.AudioEncoding


# ----------------------------------------------------------------------------- helpers


def clip_row(clip_id: str) -> dict[str, Any]:
    for line in (DATA_DIR / "manifest.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["id"] == clip_id:
            return row  # type: ignore[no-any-return]
    raise KeyError(clip_id)


def clip_bytes(clip_id: str) -> bytes:
    return (DATA_DIR / clip_row(clip_id)["audio"]).read_bytes()


def clip_samples(clip_id: str, rate: int) -> np.ndarray:
    data, sr = sf.read(DATA_DIR / clip_row(clip_id)["audio"], dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    return soxr.resample(mono, sr, rate).astype(np.float32) if sr != rate else mono


def wer(reference: str, hypothesis: str) -> float:
    """WER in percent after Whisper's English normalizer."""
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    return 100.0 * float(jiwer.wer(norm(reference), norm(hypothesis)))


def metric_value(server: ServerProcess, name: str, *, api_key: str | None = None, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`, scraped from /metrics."""
    headers = {"x-api-key": api_key} if api_key else {}
    response = httpx.get(f"{server.base_url}/metrics", headers=headers, timeout=10)
    response.raise_for_status()
    text = response.text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def recognize_request(audio: bytes, encoding: int = Enc.ENCODING_UNSPECIFIED, **config: Any) -> pb.RecognizeRequest:
    return pb.RecognizeRequest(config=pb.RecognitionConfig(encoding=encoding, **config),
                               audio=pb.RecognitionAudio(content=audio))


def stream_requests(config: pb.RecognitionConfig, audio: bytes, chunk_bytes: int,
                    **streaming: Any) -> Iterator[pb.StreamingRecognizeRequest]:
    yield pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(config=config, **streaming))
    for i in range(0, len(audio), chunk_bytes):
        yield pb.StreamingRecognizeRequest(audio_content=audio[i : i + chunk_bytes])


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_target) as ch:
        grpc.channel_ready_future(ch).result(timeout=30)
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> speech_pb2_grpc.SpeechStub:
    return speech_pb2_grpc.SpeechStub(channel)


def _variant(fmt: str, rate: int) -> bytes:
    return encode_variant(clip_samples(VARIANT_CLIP, rate), rate, fmt)


RECOGNIZE_CASES: dict[str, tuple[str, Any]] = {
    # name: (clip, request builder)
    "flac_file_auto": (FILE_CLIP, lambda: recognize_request(clip_bytes(FILE_CLIP))),
    "flac_declared": (FILE_CLIP, lambda: recognize_request(clip_bytes(FILE_CLIP), Enc.FLAC)),
    "wav_44k": (VARIANT_CLIP, lambda: recognize_request(_variant("wav", 44100), Enc.WAV)),
    "linear16_16k": (VARIANT_CLIP, lambda: recognize_request(_variant("linear16", 16000), Enc.LINEAR16,
                                                             sample_rate_hertz=16000)),
    "linear16_48k": (VARIANT_CLIP, lambda: recognize_request(_variant("linear16", 48000), Enc.LINEAR16,
                                                             sample_rate_hertz=48000)),
    "mulaw_8k": (VARIANT_CLIP, lambda: recognize_request(_variant("mulaw", 8000), Enc.MULAW,
                                                         sample_rate_hertz=8000, language_code="en-US")),
    "words_alternatives": (FILE_CLIP, lambda: recognize_request(
        clip_bytes(FILE_CLIP), Enc.FLAC, enable_word_time_offsets=True, enable_word_confidence=True,
        max_alternatives=3, request_id="client-chosen-id")),
}


@pytest.fixture(scope="module")
def recognized(stub: speech_pb2_grpc.SpeechStub) -> dict[str, Any]:
    """Every RECOGNIZE_CASES call in flight at once; name -> response or RpcError."""
    futures = {name: stub.Recognize.future(build(), timeout=TIMEOUT_S) for name, (_, build) in RECOGNIZE_CASES.items()}
    out: dict[str, Any] = {}
    for name, fut in futures.items():
        try:
            out[name] = fut.result()
        except grpc.RpcError as exc:
            out[name] = exc
    return out


# ----------------------------------------------------------------------------- health, reflection


@pytest.mark.parametrize("service", ["", SERVICE])
def test_health_check_serving(channel: grpc.Channel, service: str) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_health_unknown_service_not_found(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_and_describes_the_service(channel: grpc.Channel) -> None:
    db = ProtoReflectionDescriptorDatabase(channel)
    services = db.get_services()
    assert SERVICE in services
    assert "grpc.health.v1.Health" in services
    assert "google.longrunning.Operations" in services
    file = db.FindFileContainingSymbol(SERVICE)
    assert file.package == "oasr.speech.v1"
    assert {m.name for m in file.service[0].method} == {"Recognize", "StreamingRecognize", "LongRunningRecognize"}


# ----------------------------------------------------------------------------- Recognize


@pytest.mark.parametrize("case", sorted(RECOGNIZE_CASES))
def test_recognize_transcribes(recognized: dict[str, Any], case: str) -> None:
    resp = recognized[case]
    assert isinstance(resp, pb.RecognizeResponse), f"{case}: {resp}"
    clip_id = RECOGNIZE_CASES[case][0]
    assert len(resp.results) == 1
    text = resp.results[0].alternatives[0].transcript
    assert wer(clip_row(clip_id)["text"], text) <= MAX_WER, text
    duration = clip_row(clip_id)["duration"]
    assert resp.results[0].result_end_time.ToNanoseconds() / 1e9 == pytest.approx(duration, abs=0.1)
    assert resp.total_billed_time.seconds == int(np.ceil(duration - 1e-3))
    assert resp.request_id == google_request_id(resp.oasr_request_id) > 0


def test_concurrent_calls_were_batched(recognized: dict[str, Any], server: ServerProcess) -> None:
    """The calls fired together by `recognized` shared engine steps (one event loop, one engine)."""
    assert all(isinstance(r, pb.RecognizeResponse) for r in recognized.values())
    total = metric_value(server, "oasr_engine_batch_size_count")
    single = metric_value(server, "oasr_engine_batch_size_bucket", le="1.0")
    assert total > single, (total, single)


def test_recognize_words_have_offsets_and_confidence(recognized: dict[str, Any]) -> None:
    resp = recognized["words_alternatives"]
    assert isinstance(resp, pb.RecognizeResponse), resp
    best = resp.results[0].alternatives[0]
    words = list(best.words)
    assert [w.word.lower().strip(",.") for w in words][:4] == ["and", "so", "my", "fellow"]
    starts = [w.start_time.ToNanoseconds() / 1e9 for w in words]
    ends = [w.end_time.ToNanoseconds() / 1e9 for w in words]
    assert starts == sorted(starts)
    assert all(s <= e for s, e in zip(starts, ends))
    assert 0.0 <= starts[0] < 1.5 and 9.0 < ends[-1] <= 11.0  # speech spans most of the 11 s clip
    assert all(0.0 < w.confidence <= 1.0 for w in words)


def test_recognize_max_alternatives_and_request_id(recognized: dict[str, Any]) -> None:
    resp = recognized["words_alternatives"]
    assert isinstance(resp, pb.RecognizeResponse), resp
    assert resp.oasr_request_id == "client-chosen-id" and resp.request_id > 0
    alts = resp.results[0].alternatives
    assert 2 <= len(alts) <= 3
    assert all(0.0 < a.confidence <= 1.0 for a in alts)
    assert alts[0].confidence >= alts[-1].confidence
    assert not alts[1].words  # words belong to the best alternative only


def test_recognize_without_alternatives_returns_one(recognized: dict[str, Any]) -> None:
    resp = recognized["flac_declared"]
    assert isinstance(resp, pb.RecognizeResponse), resp
    assert len(resp.results[0].alternatives) == 1
    assert not resp.results[0].alternatives[0].words


# ----------------------------------------------------------------------------- StreamingRecognize (offline)


def test_streaming_linear16_chunks_buffered_to_half_close(stub: speech_pb2_grpc.SpeechStub) -> None:
    rate = 16000
    audio = _variant("linear16", rate)
    config = pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=rate, request_id="stream-1")
    # 100 ms chunks, plus one odd byte split across messages: frames may be cut anywhere
    chunk = rate * 2 * CHUNK_MS // 1000 + 1
    responses = list(stub.StreamingRecognize(stream_requests(config, audio, chunk, interim_results=True),
                                             timeout=TIMEOUT_S))
    assert len(responses) == 1
    (result,) = responses[0].results
    assert result.is_final
    assert responses[0].oasr_request_id == "stream-1"
    assert wer(clip_row(VARIANT_CLIP)["text"], result.alternatives[0].transcript) <= MAX_WER
    assert result.result_end_time.ToNanoseconds() / 1e9 == pytest.approx(clip_row(VARIANT_CLIP)["duration"], abs=0.1)


def test_streaming_flac_file_in_chunks(stub: speech_pb2_grpc.SpeechStub) -> None:
    config = pb.RecognitionConfig(encoding=Enc.FLAC, enable_word_time_offsets=True)
    responses = list(stub.StreamingRecognize(stream_requests(config, clip_bytes(FILE_CLIP), 16384),
                                             timeout=TIMEOUT_S))
    (result,) = responses[-1].results
    assert result.is_final
    assert wer(clip_row(FILE_CLIP)["text"], result.alternatives[0].transcript) <= MAX_WER
    assert len(result.alternatives[0].words) >= 20


def test_streaming_voice_events_on_offline_engine_final_per_utterance(stub: speech_pb2_grpc.SpeechStub) -> None:
    """Offline engine + server VAD: each utterance is recognized when its speech ends."""
    first, second, pause_s, rate = VARIANT_CLIP, "mfa_thoughts", 1.5, 16000
    audio = np.concatenate([clip_samples(first, rate), np.zeros(int(pause_s * rate), np.float32),
                            clip_samples(second, rate)])
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    config = pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=rate)
    responses = list(stub.StreamingRecognize(
        stream_requests(config, pcm, rate * 2 * CHUNK_MS // 1000, enable_voice_activity_events=True),
        timeout=TIMEOUT_S))
    events = [pb.StreamingRecognizeResponse.SpeechEventType.Name(r.speech_event_type) for r in responses
              if r.speech_event_type]
    assert events == ["SPEECH_ACTIVITY_BEGIN", "SPEECH_ACTIVITY_END"] * 2
    finals = [r.results[0] for r in responses if r.results]
    assert [f.is_final for f in finals] == [True, True]
    for final, clip_id in zip(finals, (first, second)):
        assert wer(clip_row(clip_id)["text"], final.alternatives[0].transcript) <= MAX_WER
    assert finals[0].result_end_time.ToNanoseconds() / 1e9 < clip_row(first)["duration"] + pause_s


# ----------------------------------------------------------------------------- errors


BAD_RECOGNIZE = {
    "headerless_without_rate": (recognize_request(b"\x00\x01" * 8000, Enc.LINEAR16),
                                grpc.StatusCode.INVALID_ARGUMENT, "sample_rate_hertz is required"),
    "uri": (pb.RecognizeRequest(config=pb.RecognitionConfig(), audio=pb.RecognitionAudio(uri="gs://b/o.flac")),
            grpc.StatusCode.INVALID_ARGUMENT, "uri is not supported"),
    "empty_audio": (recognize_request(b"", Enc.FLAC), grpc.StatusCode.INVALID_ARGUMENT, "content is empty"),
    "garbage": (recognize_request(b"this is not audio at all" * 40), grpc.StatusCode.INVALID_ARGUMENT, ""),
    "unknown_encoding_number": (recognize_request(b"\x00" * 3200, 57, sample_rate_hertz=16000),
                                grpc.StatusCode.INVALID_ARGUMENT, "not a known AudioEncoding"),
    "bad_language": (recognize_request(b"\x00" * 3200, Enc.LINEAR16, sample_rate_hertz=16000, language_code="e1"),
                     grpc.StatusCode.INVALID_ARGUMENT, "language_code"),
    "bad_temperature": (pb.RecognizeRequest(
        config=pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=16000,
                                    decoding=pb.DecodingExtensions(temperature=5.0)),
        audio=pb.RecognitionAudio(content=b"\x00" * 3200)), grpc.StatusCode.INVALID_ARGUMENT, "temperature"),
    "rate_out_of_range": (recognize_request(b"\x00" * 3200, Enc.LINEAR16, sample_rate_hertz=100),
                          grpc.StatusCode.INVALID_ARGUMENT, "100 Hz"),
    "oversize_message": (recognize_request(b"\x00" * (26 * 1024 * 1024), Enc.LINEAR16, sample_rate_hertz=16000),
                         grpc.StatusCode.RESOURCE_EXHAUSTED, ""),
}


@pytest.mark.parametrize("case", sorted(BAD_RECOGNIZE))
def test_recognize_bad_input(stub: speech_pb2_grpc.SpeechStub, server: ServerProcess, case: str) -> None:
    request, code, message = BAD_RECOGNIZE[case]
    before = metric_value(server, "oasr_grpc_requests_total", method="Recognize", code=code.name)
    with pytest.raises(grpc.RpcError) as err:
        stub.Recognize(request, timeout=TIMEOUT_S)
    assert err.value.code() == code, err.value.details()
    assert err.value.details() and message in err.value.details()
    if case != "oversize_message":  # grpc refuses that one before our handler runs
        assert metric_value(server, "oasr_grpc_requests_total", method="Recognize", code=code.name) == before + 1


BAD_STREAMS: dict[str, tuple[list[pb.StreamingRecognizeRequest], grpc.StatusCode, str]] = {
    "audio_before_config": ([pb.StreamingRecognizeRequest(audio_content=b"\x00" * 320)],
                            grpc.StatusCode.INVALID_ARGUMENT, "must carry streaming_config"),
    "config_twice": ([pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(
                          config=pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=16000)))] * 2,
                     grpc.StatusCode.INVALID_ARGUMENT, "only the first"),
    "no_messages": ([], grpc.StatusCode.INVALID_ARGUMENT, "streaming_config first"),
    "no_audio": ([pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(
                     config=pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=16000)))],
                 grpc.StatusCode.INVALID_ARGUMENT, "no audio_content"),
    "headerless_without_rate": ([pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(
                                    config=pb.RecognitionConfig(encoding=Enc.MULAW)))],
                                grpc.StatusCode.INVALID_ARGUMENT, "sample_rate_hertz is required"),
    "half_frame_at_end": ([pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(
                              config=pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=16000))),
                           pb.StreamingRecognizeRequest(audio_content=b"\x00" * 3201)],
                          grpc.StatusCode.INVALID_ARGUMENT, "inside a frame"),
}


@pytest.mark.parametrize("case", sorted(BAD_STREAMS))
def test_streaming_bad_input(stub: speech_pb2_grpc.SpeechStub, case: str) -> None:
    requests, code, message = BAD_STREAMS[case]
    with pytest.raises(grpc.RpcError) as err:
        list(stub.StreamingRecognize(iter(requests), timeout=TIMEOUT_S))
    assert err.value.code() == code, err.value.details()
    assert err.value.details() and message in err.value.details()


# ----------------------------------------------------------------------------- cancellation, still serving


def test_cancelled_recognize_aborts_the_engine_request(stub: speech_pb2_grpc.SpeechStub,
                                                       server: ServerProcess) -> None:
    admitted = metric_value(server, "oasr_requests_admitted_total")
    cancelled = metric_value(server, "oasr_requests_cancelled_total")
    grpc_cancelled = metric_value(server, "oasr_grpc_requests_total", method="Recognize", code="CANCELLED")
    call = stub.Recognize.future(recognize_request(clip_bytes(LONG_CLIP)), timeout=TIMEOUT_S)
    deadline = time.monotonic() + 60
    while metric_value(server, "oasr_requests_admitted_total") == admitted:  # the engine has it now
        assert time.monotonic() < deadline and not call.done(), "the request never reached the engine"
        time.sleep(0.05)
    assert call.cancel()
    deadline = time.monotonic() + 30
    while metric_value(server, "oasr_requests_cancelled_total") == cancelled:
        assert time.monotonic() < deadline, "the cancelled call was not counted"
        time.sleep(0.1)
    assert metric_value(server, "oasr_grpc_requests_total", method="Recognize", code="CANCELLED") == grpc_cancelled + 1
    while True:  # the engine dropped the aborted request instead of decoding all 52 s
        ready = httpx.get(f"{server.base_url}/readyz", timeout=10).json()
        if ready["running"] == 0 and ready["waiting"] == 0 and ready["inflight"] == 0:
            break
        assert time.monotonic() < deadline, ready
        time.sleep(0.1)


def test_server_still_serves_after_errors(stub: speech_pb2_grpc.SpeechStub, channel: grpc.Channel) -> None:
    resp = stub.Recognize(recognize_request(clip_bytes(FILE_CLIP)), timeout=TIMEOUT_S)
    assert wer(clip_row(FILE_CLIP)["text"], resp.results[0].alternatives[0].transcript) <= MAX_WER
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
