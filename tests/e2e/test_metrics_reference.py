"""Issue 13 must-show 4: after mixed traffic, a live server's `/metrics` holds every series seed
001's metrics reference names, with the document's labels (the GPU ones excepted on the CPU).

One streaming server (`uvicorn --factory app.main:create_app`, OASR_SERVICE_MODE=streaming) on a cache-aware WeNet
checkpoint, the family with a paged KV pool, so the KV-block gauges exist (the document has them
absent on runtimes without a pool, e.g. Whisper's). Traffic through real clients: an OpenAI file
upload (httpx multipart), a Google `speech:recognize`, a gRPC `Recognize`, a live gRPC
`StreamingRecognize` with interim results, and a translation this model cannot serve (rejected at
admission). The scrape is parsed with prometheus_client's text parser. Names and labels are
asserted, never values that depend on timing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.e2e.conftest import ServerProcess, start_wenet_streaming_server
from tests.e2e.test_grpc import clip_bytes, clip_samples

CLIP = "libri_61-70968-0000"  # 4.9 s
RATE = 16000  # Hz
TIMEOUT_S = 300.0  # per client call on a loaded 2-core box; never unbounded
E = ("engine", "model", "decode_method")

# Seed 001, "Metrics": every series its tables name (The SLIs, Transport, Dispatcher, Engine
# internals) and the ones "What to alert on" queries, with the document's labels.
REFERENCE: dict[str, set[str]] = {
    # The SLIs
    "oasr_request_duration_seconds": {"api", "mode", "outcome"},
    "oasr_audio_seconds_total": {"api", "mode"},
    "oasr_request_audio_seconds": {"api", "mode"},
    "oasr_time_to_first_partial_seconds": {"api"},
    # Transport
    "oasr_http_requests_total": {"method", "route", "status"},
    "oasr_http_request_duration_seconds": {"method", "route"},
    "oasr_http_requests_in_flight": {"method", "route"},
    "oasr_grpc_requests_total": {"method", "code"},
    "oasr_grpc_request_duration_seconds": {"method"},
    # Dispatcher
    "oasr_dispatch_tick_seconds": set(E),
    "oasr_engine_step_seconds": set(E),
    "oasr_dispatch_admit_seconds": set(E),
    "oasr_dispatch_extract_seconds": set(E),
    "oasr_dispatch_route_seconds": set(E),
    "oasr_engine_running": set(E),
    "oasr_engine_waiting": set(E),
    "oasr_engine_outputs_total": set(E),
    "oasr_requests_admitted_total": set(E),
    "oasr_requests_rejected_total": set(E),
    "oasr_requests_busy_total": set(E),
    "oasr_engine_step_failures_total": set(E),
    "oasr_requests_cancelled_total": set(E),
    "oasr_requests_failed_total": {*E, "stage"},
    "oasr_events_dropped_total": set(E),
    "oasr_events_deferred_total": set(E),
    # Engine internals
    "oasr_engine_stage_host_seconds": {*E, "stage"},
    "oasr_engine_batch_size": {*E, "mode"},
    "oasr_engine_batch_padding_ratio": set(E),
    "oasr_engine_queue_wait_seconds": {*E, "mode"},
    "oasr_engine_kv_blocks_used": set(E),
    "oasr_engine_kv_blocks_capacity": set(E),
    "oasr_engine_kv_exhausted_total": set(E),
    "oasr_engine_decode_slots_in_use": set(E),
    "oasr_engine_decode_slots_capacity": set(E),
    "oasr_engine_tokens_generated_total": set(E),
    "oasr_engine_search_overflow_total": set(E),
    "oasr_engine_audio_seconds_total": set(E),
    "oasr_engine_metric_samples_dropped_total": set(E),
    "oasr_gpu_memory_used_bytes": set(E),
    "oasr_gpu_memory_total_bytes": set(E),
    "oasr_gpu_utilization_ratio": set(E),
}
Families = dict[str, list[tuple[str, dict[str, str]]]]
CUDA_ONLY = {"oasr_gpu_memory_used_bytes", "oasr_gpu_memory_total_bytes", "oasr_gpu_utilization_ratio"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_wenet_streaming_server(tmp_path_factory.mktemp("metrics-reference"))
    yield srv
    srv.terminate()


def pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def live_stream(audio: bytes) -> Iterator[pb.StreamingRecognizeRequest]:
    config = pb.RecognitionConfig(encoding=pb.RecognitionConfig.LINEAR16, sample_rate_hertz=RATE)
    yield pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(config=config,
                                                                                      interim_results=True))
    step = RATE * 2 // 10  # 100 ms chunks, sent at twice real time so partials come before the end
    for i in range(0, len(audio), step):
        yield pb.StreamingRecognizeRequest(audio_content=audio[i : i + step])
        time.sleep(0.05)


@pytest.fixture(scope="module")
def families(server: ServerProcess) -> Families:
    """Drive the mixed traffic, then scrape: family name as in PromQL -> its samples' names and labels."""
    wav, audio = clip_bytes(CLIP), pcm16(clip_samples(CLIP, RATE))
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as http:
        upload = http.post("/v1/audio/transcriptions", files={"file": ("clip.wav", wav)}, data={"model": "whisper-1"})
        assert upload.status_code == 200, upload.text
        google = http.post("/v1/speech:recognize", params={"encoding": "LINEAR16", "sample_rate_hertz": RATE},
                           content=audio)
        assert google.status_code == 200, google.text
        refused = http.post("/v1/audio/translations", files={"file": ("clip.wav", wav)}, data={"model": "whisper-1"})
        assert refused.status_code == 400, refused.text  # a CTC model only transcribes
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = speech_pb2_grpc.SpeechStub(channel)
        config = pb.RecognitionConfig(encoding=pb.RecognitionConfig.LINEAR16, sample_rate_hertz=RATE)
        stub.Recognize(pb.RecognizeRequest(config=config, audio=pb.RecognitionAudio(content=audio)),
                       timeout=TIMEOUT_S)
        responses = list(stub.StreamingRecognize(live_stream(audio[: 2 * RATE * 2]), timeout=TIMEOUT_S))
        assert any(not r.results[0].is_final for r in responses if r.results), "no interim result"
        assert responses[-1].results[0].is_final
    scrape = httpx.get(server.base_url + "/metrics", timeout=30)
    assert scrape.status_code == 200
    out: Families = {}
    for family in text_string_to_metric_families(scrape.text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        out.setdefault(name, []).extend((s.name, s.labels) for s in family.samples if not s.name.endswith("_created"))
    return out


def test_every_series_of_the_metrics_reference_is_exported(families: Families) -> None:
    expected = set(REFERENCE) if _on_cuda() else set(REFERENCE) - CUDA_ONLY
    missing = sorted(name for name in expected if not families.get(name))
    assert not missing, f"/metrics lacks series for {missing}"
    if not _on_cuda():
        assert not CUDA_ONLY & set(families), "GPU series on a CPU server"


def test_each_series_has_the_documents_labels(families: Families) -> None:
    for name, labels in REFERENCE.items():
        for _, sample_labels in families.get(name, []):
            assert set(sample_labels) - {"le"} == labels, (name, sample_labels)


def test_the_traffic_shows_in_its_series(families: Families) -> None:
    """Each kind of request left its mark under the document's label values."""
    def has(sample: str, **labels: str) -> bool:
        family = sample.removesuffix("_count")
        return any(n == sample and labels.items() <= s.items() for n, s in families.get(family, []))

    for api, mode in (("openai", "offline"), ("google", "offline"), ("grpc", "offline"),
                      ("grpc_streaming", "streaming")):
        assert has("oasr_request_duration_seconds_count", api=api, mode=mode, outcome="ok"), api
        assert has("oasr_request_audio_seconds_count", api=api, mode=mode), api
    assert has("oasr_time_to_first_partial_seconds_count", api="grpc_streaming")
    assert has("oasr_http_requests_total", method="POST", route="/v1/audio/translations", status="400")
    assert has("oasr_grpc_request_duration_seconds_count", method="StreamingRecognize")
    for mode in ("offline", "streaming"):
        assert has("oasr_engine_batch_size_count", mode=mode), mode
        assert has("oasr_engine_queue_wait_seconds_count", mode=mode), mode
    assert has("oasr_engine_stage_host_seconds_count", stage="streaming.allocate")  # the engine's own stage


def test_the_rejected_translation_was_counted_at_admission(server: ServerProcess,
                                                           families: Families) -> None:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    rejected = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "oasr_requests_rejected_total"]
    assert rejected and rejected[0] >= 1


def _on_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
