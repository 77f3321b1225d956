"""StreamingRecognize on a streaming engine (`OASR_SERVICE_MODE=streaming`), end to end with
real grpcio stubs against a real server:

- the protocol (interim results before the audio ends, then one final per utterance,
  committed text never changing, `single_utterance`, server-VAD voice events, rejection of
  container audio, a cancelled stream aborting its engine request) on a cache-aware WeNet
  Conformer-CTC checkpoint. No real WeNet weights can be fetched here, so it is the
  random-init checkpoint `engine.models.wenet.testing` writes in the real on-disk format:
  the engine, runtime and server are real, the transcripts are meaningless, so these tests
  check timing, ordering and shape, never words;
- transcripts from Whisper's streaming runtime on the embedded tiny.en; a server that reports
  streaming disabled for it fails these tests (that is the regression they guard).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.e2e.conftest import ServerProcess, start_server, start_wenet_streaming_server
from tests.e2e.test_grpc import clip_bytes, clip_row, clip_samples, metric_value, wer

Enc = pb.RecognitionConfig.AudioEncoding
Event = pb.StreamingRecognizeResponse.SpeechEventType
RATE = 16000  # Hz: what the client sends (the server resamples other rates)
CHUNK_MS = 100
PACE = 0.5  # wall seconds per audio second: twice real time keeps the tests short
TIMEOUT_S = 120.0
FIRST, SECOND = "libri_61-70968-0000", "mfa_thoughts"  # two utterances
PAUSE_S = 1.5  # silence between them: longer than the VAD's 500 ms end-of-turn silence


def pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def two_utterances() -> np.ndarray:
    return np.concatenate([clip_samples(FIRST, RATE), np.zeros(int(PAUSE_S * RATE), np.float32),
                           clip_samples(SECOND, RATE)])


class Client:
    """Sends `audio` in 100 ms chunks at PACE; records when it finished sending.
    With hold_open the stream is not half-closed until `release()` (a live microphone)."""

    def __init__(self, audio: bytes, config: pb.StreamingRecognitionConfig, hold_open: bool = False):
        self.audio, self.config, self.hold_open = audio, config, hold_open
        self.sent_all_at: float | None = None
        self._release = threading.Event()

    def requests(self) -> Iterator[pb.StreamingRecognizeRequest]:
        yield pb.StreamingRecognizeRequest(streaming_config=self.config)
        step = RATE * 2 * CHUNK_MS // 1000
        for i in range(0, len(self.audio), step):
            yield pb.StreamingRecognizeRequest(audio_content=self.audio[i : i + step])
            time.sleep(CHUNK_MS / 1000 * PACE)
        self.sent_all_at = time.monotonic()
        if self.hold_open:
            self._release.wait(TIMEOUT_S)

    def release(self) -> None:
        self._release.set()

    def run(self, stub: speech_pb2_grpc.SpeechStub) -> list[tuple[float, pb.StreamingRecognizeResponse]]:
        try:
            return [(time.monotonic(), r) for r in stub.StreamingRecognize(self.requests(), timeout=TIMEOUT_S)]
        finally:
            self.release()


def streaming_config(request_id: str = "", **kwargs: Any) -> pb.StreamingRecognitionConfig:
    config = pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=RATE, request_id=request_id)
    return pb.StreamingRecognitionConfig(config=config, **kwargs)


def results(responses: list[tuple[float, pb.StreamingRecognizeResponse]]) -> list[tuple[float, Any]]:
    return [(t, r.results[0]) for t, r in responses if r.results]


def assert_committed_never_changes(partials: list[Any], final_text: str) -> None:
    """The committed part of each interim (its first `stability` fraction) stays a prefix."""
    texts = [p.alternatives[0].transcript for p in partials]
    for i, p in enumerate(partials):
        committed = texts[i][: round(p.stability * len(texts[i]))]
        for later in [*texts[i + 1 :], final_text]:
            assert later.startswith(committed), (committed, later)


def seconds(d: Any) -> float:
    return float(d.ToNanoseconds()) / 1e9


# ----------------------------------------------------------------------------- WeNet streaming server


@pytest.fixture(scope="module")
def wenet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_wenet_streaming_server(tmp_path_factory.mktemp("wenet"))
    info = httpx.get(f"{srv.base_url}/v1/models", timeout=10).json()["data"][0]["info"]
    assert info["streaming_enabled"], info
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def wenet_stub(wenet_server: ServerProcess) -> Iterator[speech_pb2_grpc.SpeechStub]:
    with grpc.insecure_channel(wenet_server.grpc_target) as ch:
        yield speech_pb2_grpc.SpeechStub(ch)


def test_interim_results_then_one_final(wenet_stub: speech_pb2_grpc.SpeechStub, wenet_server: ServerProcess) -> None:
    audio = clip_samples(FIRST, RATE)
    first_partial = metric_value(wenet_server, "oasr_time_to_first_partial_seconds_count", api="grpc_streaming")
    client = Client(pcm16(audio), streaming_config("live-1", interim_results=True))
    responses = client.run(wenet_stub)
    res = results(responses)
    partials = [r for _, r in res if not r.is_final]
    finals = [r for _, r in res if r.is_final]
    assert len(finals) == 1 and res[-1][1].is_final  # whole stream = one utterance, final last
    assert len(partials) >= 3
    assert client.sent_all_at is not None and res[0][0] < client.sent_all_at  # live, not buffered
    ends = [seconds(r.result_end_time) for _, r in res]
    assert ends == sorted(ends) and ends[-1] == pytest.approx(len(audio) / RATE, abs=0.05)
    assert all(0.0 <= p.stability <= 1.0 for p in partials)
    assert_committed_never_changes(partials, finals[0].alternatives[0].transcript)
    assert {r.oasr_request_id for _, r in responses} == {"live-1"}
    assert all(r.speech_event_type == Event.SPEECH_EVENT_UNSPECIFIED for _, r in responses)
    assert metric_value(wenet_server, "oasr_time_to_first_partial_seconds_count", api="grpc_streaming") == first_partial + 1
    assert metric_value(wenet_server, "oasr_stream_sessions_active", api="grpc_streaming") == 0


def test_without_interim_results_only_finals(wenet_stub: speech_pb2_grpc.SpeechStub) -> None:
    audio = clip_samples(SECOND, 8000)  # 8 kHz telephone audio, resampled by the server
    body = pcm16(audio)
    cuts = [0, 1, 2, 3, 777, 5001, len(body) // 2 + 1, len(body)]  # starts with partial frames, odd sizes
    config = pb.StreamingRecognitionConfig(config=pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=8000))
    requests = [pb.StreamingRecognizeRequest(streaming_config=config)] + [
        pb.StreamingRecognizeRequest(audio_content=body[a:b]) for a, b in itertools.pairwise(cuts)
    ]
    responses = list(wenet_stub.StreamingRecognize(iter(requests), timeout=TIMEOUT_S))
    assert [r.results[0].is_final for r in responses] == [True]
    assert seconds(responses[0].results[0].result_end_time) == pytest.approx(len(audio) / 8000, abs=0.05)



def _stream_finals(stub: speech_pb2_grpc.SpeechStub, body: bytes, config: pb.StreamingRecognitionConfig,
                   cut: int = 3333) -> list[pb.StreamingRecognizeResponse]:
    requests = [pb.StreamingRecognizeRequest(streaming_config=config)] + [
        pb.StreamingRecognizeRequest(audio_content=body[i : i + cut]) for i in range(0, len(body), cut)]
    return list(stub.StreamingRecognize(iter(requests), timeout=TIMEOUT_S))


def test_per_channel_live_stream_matches_each_channel_alone(wenet_stub: speech_pb2_grpc.SpeechStub) -> None:
    left, right = clip_samples(FIRST, RATE), clip_samples(SECOND, RATE)
    n = max(len(left), len(right))
    channels = [np.pad(c, (0, n - len(c))) for c in (left, right)]
    alone = {}
    for tag, mono in enumerate(channels, start=1):
        responses = _stream_finals(wenet_stub, pcm16(mono), streaming_config())
        alone[tag] = responses[-1].results[0].alternatives[0].transcript
    assert alone[1] != alone[2]

    config = streaming_config("stereo", interim_results=True)
    config.config.audio_channel_count = 2
    config.config.enable_separate_recognition_per_channel = True
    stereo = pcm16(np.stack(channels, axis=1))  # interleaved frames; 3333-byte messages split them
    both_interim = threading.Event()

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield pb.StreamingRecognizeRequest(streaming_config=config)
        for i in range(0, len(stereo), 3333):
            if i >= len(stereo) // 2:  # a live microphone: the rest comes once both channels showed text
                both_interim.wait(TIMEOUT_S)
            yield pb.StreamingRecognizeRequest(audio_content=stereo[i : i + 3333])

    got = []
    for response in wenet_stub.StreamingRecognize(requests(), timeout=TIMEOUT_S):
        got += list(response.results[:1])
        if {r.channel_tag for r in got if not r.is_final} == {1, 2}:
            both_interim.set()
    assert {r.channel_tag: r.alternatives[0].transcript for r in got if r.is_final} == alone
    assert [r.channel_tag for r in got if r.is_final].count(1) == 1 == [r.channel_tag for r in got if r.is_final].count(2)
    assert {r.channel_tag for r in got if not r.is_final} == {1, 2}  # both channels stream interim results
    for tag in (1, 2):  # each channel's results in order, its final last
        assert [r.is_final for r in got if r.channel_tag == tag][-1]

    for bad, message in ((stereo[:-1], "inside a frame"), (stereo, "single_utterance")):
        bad_config = pb.StreamingRecognitionConfig()
        bad_config.CopyFrom(config)
        bad_config.single_utterance = message == "single_utterance"
        with pytest.raises(grpc.RpcError) as err:
            _stream_finals(wenet_stub, bad, bad_config)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in (err.value.details() or "")

@pytest.mark.parametrize("voice_events", [False, True])
def test_live_stream_without_audio_is_invalid(wenet_stub: speech_pb2_grpc.SpeechStub, voice_events: bool) -> None:
    requests = iter([pb.StreamingRecognizeRequest(streaming_config=streaming_config(
        enable_voice_activity_events=voice_events))])
    with pytest.raises(grpc.RpcError) as err:
        list(wenet_stub.StreamingRecognize(requests, timeout=TIMEOUT_S))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "no audio_content" in err.value.details()


def test_voice_activity_events_and_one_final_per_utterance(wenet_stub: speech_pb2_grpc.SpeechStub) -> None:
    client = Client(pcm16(two_utterances()), streaming_config(interim_results=True, enable_voice_activity_events=True))
    responses = [r for _, r in client.run(wenet_stub)]
    kinds = []
    for r in responses:
        if r.speech_event_type != Event.SPEECH_EVENT_UNSPECIFIED:
            kinds.append(Event.Name(r.speech_event_type))
        elif r.results[0].is_final:
            kinds.append("final")
    assert kinds == ["SPEECH_ACTIVITY_BEGIN", "SPEECH_ACTIVITY_END", "final"] * 2
    events = [(r.speech_event_type, seconds(r.speech_event_time)) for r in responses
              if r.speech_event_type != Event.SPEECH_EVENT_UNSPECIFIED]
    first_len = clip_row(FIRST)["duration"]
    (_, begin1), (_, end1), (_, begin2), (_, end2) = events
    assert 0.0 <= begin1 < 1.0
    assert first_len - 1.5 < end1 <= first_len + 0.2  # speech ends before the pause
    assert first_len + PAUSE_S - 0.2 <= begin2 < first_len + PAUSE_S + 1.5  # and resumes after it
    assert begin2 < end2 <= first_len + PAUSE_S + clip_row(SECOND)["duration"] + 0.2
    finals = [r.results[0] for r in responses if r.results and r.results[0].is_final]
    assert seconds(finals[0].result_end_time) <= begin2 < seconds(finals[1].result_end_time)


def test_single_utterance_ends_the_call_after_the_first_turn(wenet_stub: speech_pb2_grpc.SpeechStub) -> None:
    # the client never half-closes: the server must end the call itself
    client = Client(pcm16(two_utterances()), streaming_config(single_utterance=True, interim_results=True),
                    hold_open=True)
    responses = [r for _, r in client.run(wenet_stub)]
    events = [r.speech_event_type for r in responses if r.speech_event_type != Event.SPEECH_EVENT_UNSPECIFIED]
    assert events == [Event.END_OF_SINGLE_UTTERANCE]
    finals = [r.results[0] for r in responses if r.results and r.results[0].is_final]
    assert len(finals) == 1 and responses[-1].results[0].is_final
    assert seconds(finals[0].result_end_time) <= clip_row(FIRST)["duration"] + 0.5


def test_container_encoding_is_rejected(wenet_stub: speech_pb2_grpc.SpeechStub) -> None:
    config = pb.StreamingRecognitionConfig(config=pb.RecognitionConfig(encoding=Enc.FLAC))
    requests = iter([pb.StreamingRecognizeRequest(streaming_config=config),
                     pb.StreamingRecognizeRequest(audio_content=clip_bytes(FIRST))])
    with pytest.raises(grpc.RpcError) as err:
        list(wenet_stub.StreamingRecognize(requests, timeout=TIMEOUT_S))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "LINEAR16" in err.value.details() and "Recognize" in err.value.details()


def test_cancelled_stream_aborts_its_engine_request(wenet_stub: speech_pb2_grpc.SpeechStub,
                                                    wenet_server: ServerProcess) -> None:
    cancelled = metric_value(wenet_server, "oasr_grpc_requests_total", method="StreamingRecognize", code="CANCELLED")
    client = Client(pcm16(two_utterances()), streaming_config(interim_results=True), hold_open=True)
    call = wenet_stub.StreamingRecognize(client.requests(), timeout=TIMEOUT_S)
    first = next(call)
    assert first.results and not first.results[0].is_final
    ready = httpx.get(f"{wenet_server.base_url}/readyz", timeout=10).json()
    assert ready["running"] == 1 and ready["inflight"] == 1
    call.cancel()
    client.release()
    deadline = time.monotonic() + 30
    while True:
        ready = httpx.get(f"{wenet_server.base_url}/readyz", timeout=10).json()
        if ready["running"] == 0 and ready["waiting"] == 0 and ready["inflight"] == 0:
            break
        assert time.monotonic() < deadline, ready
        time.sleep(0.1)
    while metric_value(wenet_server, "oasr_grpc_requests_total", method="StreamingRecognize",
                       code="CANCELLED") == cancelled:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert metric_value(wenet_server, "oasr_stream_sessions_active", api="grpc_streaming") == 0


# ----------------------------------------------------------------------------- Whisper streaming


@pytest.fixture(scope="module")
def whisper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("whisper-live"), env={"OASR_SERVICE_MODE": "streaming"})
    try:
        info = httpx.get(f"{srv.base_url}/v1/models", timeout=10).json()["data"][0]["info"]
        assert info.get("streaming_enabled") is True, f"streaming is disabled for {info.get('model')}: {info}"
        yield srv
    finally:
        srv.terminate()


def test_whisper_interim_then_final_transcript(whisper_server: ServerProcess) -> None:
    clip = "jfk_inaugural"
    audio = clip_samples(clip, RATE)
    with grpc.insecure_channel(whisper_server.grpc_target) as ch:
        client = Client(pcm16(audio), streaming_config(interim_results=True))
        res = results(client.run(speech_pb2_grpc.SpeechStub(ch)))
    partials = [r for _, r in res if not r.is_final]
    finals = [r for _, r in res if r.is_final]
    assert partials and client.sent_all_at is not None and res[0][0] < client.sent_all_at
    assert len(finals) == 1 and res[-1][1].is_final
    final_text = finals[0].alternatives[0].transcript
    assert wer(clip_row(clip)["text"], final_text) <= 15.0, final_text
    assert_committed_never_changes(partials, final_text)
