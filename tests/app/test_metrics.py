"""app.metrics and app.engine_metrics: the declared families and their labels, per-instance
registries, and how one engine's series export the engine-side collector."""

from __future__ import annotations

import asyncio

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from app.engine_metrics import EngineSeries
from app.metrics import BATCH_SIZE_BUCKETS, ENGINE_LABELS, METRIC_NAMES, SECTIONS, Metrics
from app.output_stream import OutputStream
from engine import RequestOutput
from engine.metrics import EngineMetrics
from engine.runner import RunnerStats

E = set(ENGINE_LABELS)
# The contract with dashboards and alert rules: family name (as in PromQL) -> label names.
EXPECTED_LABELS: dict[str, set[str]] = {
    # requests
    "oasr_request_duration_seconds": {"api", "mode", "outcome"},
    "oasr_audio_seconds_total": {"api", "mode"},
    "oasr_request_audio_seconds": {"api", "mode"},
    "oasr_time_to_first_partial_seconds": {"api"},
    "oasr_stream_sessions_active": {"api"},
    "oasr_stream_realtime_factor": set(),
    # transport
    "oasr_http_requests_total": {"method", "route", "status"},
    "oasr_http_request_duration_seconds": {"method", "route"},
    "oasr_http_requests_in_flight": {"method", "route"},
    "oasr_grpc_requests_total": {"method", "code"},
    "oasr_grpc_request_duration_seconds": {"method"},
    # dispatcher
    "oasr_dispatch_tick_seconds": E,
    "oasr_engine_step_seconds": E,
    "oasr_dispatch_admit_seconds": E,
    "oasr_dispatch_extract_seconds": E,
    "oasr_dispatch_route_seconds": E,
    "oasr_engine_running": E,
    "oasr_engine_waiting": E,
    "oasr_engine_queue_delay_seconds": E,
    "oasr_engine_outputs_total": E,
    "oasr_requests_admitted_total": E,
    "oasr_requests_rejected_total": E,
    "oasr_requests_busy_total": E,
    "oasr_engine_step_failures_total": E,
    "oasr_requests_cancelled_total": E,
    "oasr_requests_failed_total": E | {"stage"},
    "oasr_events_dropped_total": E,
    "oasr_events_deferred_total": E,
    "oasr_engine_heartbeat_timestamp_seconds": E,
    # engine internals
    "oasr_engine_stage_host_seconds": E | {"stage"},
    "oasr_engine_batch_size": E | {"mode"},
    "oasr_engine_batch_padding_ratio": E,
    "oasr_engine_queue_wait_seconds": E | {"mode"},
    "oasr_engine_kv_blocks_used": E,
    "oasr_engine_kv_blocks_capacity": E,
    "oasr_engine_kv_pool_usage_ratio": E,
    "oasr_engine_kv_exhausted_total": E,
    "oasr_engine_decode_slots_in_use": E,
    "oasr_engine_decode_slots_capacity": E,
    "oasr_engine_tokens_generated_total": E,
    "oasr_engine_search_overflow_total": E,
    "oasr_engine_audio_seconds_total": E,
    "oasr_engine_metric_samples_dropped_total": E,
    "oasr_engine_stream_passes_shed_total": E,
    "oasr_engine_stream_passes_late_total": E,
    "oasr_engine_stream_passes_skipped_total": E,
    "oasr_engine_stream_passes_total": E,
    "oasr_engine_stream_encoded_seconds_total": E,
    "oasr_engine_speech_recovered_seconds_total": E,
    "oasr_engine_speech_uncovered_seconds_total": E,
    # batch jobs (app/jobs)
    "oasr_jobs": {"state"},
    "oasr_jobs_queue_age_seconds": set(),
    "oasr_job_duration_seconds": {"outcome"},
    "oasr_webhook_deliveries_total": {"outcome"},
    "oasr_model_loaded": {"model"},
    "oasr_model_loads_total": {"model"},
    "oasr_model_unloads_total": {"model", "reason"},
    "oasr_build_info": {"version", "model"},
    # CUDA only
    "oasr_gpu_memory_used_bytes": E,
    "oasr_gpu_memory_total_bytes": E,
    "oasr_gpu_utilization_ratio": E,
}
GPU_ONLY = {"oasr_gpu_memory_used_bytes", "oasr_gpu_memory_total_bytes", "oasr_gpu_utilization_ratio"}
LABELS = {"engine": "0", "model": "tiny", "decode_method": "greedy"}


def _families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """PromQL family name -> its samples (name, labels, value)."""
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        out[name] = [(s.name, s.labels, s.value) for s in family.samples]
    return out


def _value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {**LABELS, **labels})


def _observe_every_metric(m: Metrics) -> None:
    """One observation per family, through the handles the server uses."""
    m.request_duration.labels(api="openai", mode="offline", outcome="ok").observe(1.5)
    m.count_offline_audio("openai", 12.0)
    m.time_to_first_partial.labels(api="realtime").observe(0.4)
    m.stream_sessions_active.labels(api="grpc_streaming").inc()
    m.stream_realtime_factor.observe(0.97)
    m.http_requests.labels(method="POST", route="/v1/audio/transcriptions", status="200").inc()
    m.http_request_duration.labels(method="POST", route="/v1/audio/transcriptions").observe(0.2)
    m.http_requests_in_flight.labels(method="POST", route="/v1/audio/transcriptions").inc()
    m.observe_grpc("Recognize", "OK", 0.3)
    for gauge in m.declare_gpu():
        gauge.labels(**LABELS).set(1.0)
    s = EngineSeries(m, model="tiny", decode_method="greedy")
    for handle in (s.tick, s.step, s.admit, s.extract, s.route):
        handle.observe(0.001)
    for counter in (s.requests_admitted, s.requests_rejected, s.requests_busy, s.requests_cancelled,
                    s.step_failures, s.events_dropped, s.events_deferred):
        counter.inc()
    s.failed("decode")
    s.beat()
    collector = EngineMetrics()
    collector.count_outputs(2)
    collector.count_finished(tokens=5, search_overflow=False)
    collector.count_audio(3.0)
    collector.observe_stage("offline.encode", 0.02)
    collector.observe_batch("offline", 3, [0.01])
    collector.observe_padding(10.0, 8.0)
    s.export(collector.drain(), RunnerStats(kv_blocks_used=4, kv_blocks_capacity=16, kv_exhausted_total=1,
                                            decode_slots_used=1, decode_slots_capacity=8), running=3, waiting=2)
    m.jobs.labels(state="QUEUED").set(4)
    m.jobs_queue_age.set(12.5)
    m.job_duration.labels(outcome="succeeded").observe(30.0)
    m.webhook_deliveries.labels(outcome="delivered").inc()
    m.model_loaded.labels(model="tiny.en").set(1)
    m.model_loads.labels(model="tiny.en").inc()
    m.model_unloads.labels(model="tiny.en", reason="idle_ttl").inc()
    m.set_build_info(version="0.1.0", model="whisper-tiny.en")


def test_metric_names_are_exactly_the_declared_contract() -> None:
    assert len(METRIC_NAMES) == len(set(METRIC_NAMES))
    assert set(METRIC_NAMES) == set(EXPECTED_LABELS)
    m = Metrics()
    assert set(m.names()) == set(METRIC_NAMES) - GPU_ONLY  # the GPU families only when the engine is on CUDA
    m.declare_gpu()
    assert m.names() == METRIC_NAMES


def test_specs_match_what_the_registry_exposes() -> None:
    """docs/operations.md is generated from the specs: they must be the registry's own facts."""
    m = Metrics()
    m.declare_gpu()
    families = {f"{f.name}_total" if f.type == "counter" else f.name: f for f in m.registry.collect()}
    assert set(families) == set(METRIC_NAMES)
    for spec in m.specs:
        assert families[spec.name].type == spec.kind and families[spec.name].documentation == spec.help
        assert set(spec.labels) == EXPECTED_LABELS[spec.name], spec.name
        assert spec.section in SECTIONS


def test_every_metric_is_rendered_with_its_labels_after_one_observation() -> None:
    m = Metrics()
    _observe_every_metric(m)
    body, content_type = m.render()
    assert content_type.startswith("text/plain")
    text = body.decode()
    families = _families(text)
    for name, labels in EXPECTED_LABELS.items():
        assert f"# TYPE {name} " in text, name
        samples = families[name]
        assert samples, name
        seen = {k for _, sample_labels, _ in samples for k in sample_labels if k != "le"}
        assert seen == labels, name


def test_every_metric_has_a_help_text_naming_its_unit() -> None:
    m = Metrics()
    m.declare_gpu()
    for spec in m.specs:
        assert spec.help.endswith(("(seconds).", "(count).", "(ratio).", "(bytes).", "in seconds.")) or (
            spec.help.startswith("Always 1")), spec.help


def test_dispatcher_counters_are_in_the_first_scrape_at_zero() -> None:
    """Resolved once when the engine's series are made, so `rate()` reads 0 rather than no data."""
    m = Metrics()
    EngineSeries(m, model="tiny", decode_method="greedy")
    for name in ("oasr_requests_admitted_total", "oasr_requests_rejected_total", "oasr_requests_busy_total",
                 "oasr_requests_cancelled_total", "oasr_engine_step_failures_total", "oasr_events_dropped_total",
                 "oasr_events_deferred_total", "oasr_engine_outputs_total", "oasr_engine_kv_exhausted_total",
                 "oasr_engine_metric_samples_dropped_total", "oasr_engine_search_overflow_total",
                 "oasr_engine_stream_passes_shed_total", "oasr_engine_stream_passes_late_total",
                 "oasr_engine_stream_passes_skipped_total",
                 "oasr_engine_stream_passes_total", "oasr_engine_stream_encoded_seconds_total",
                 "oasr_engine_speech_recovered_seconds_total", "oasr_engine_speech_uncovered_seconds_total"):
        assert _value(m, name) == 0.0, name


def test_engine_counters_replay_absolute_totals_once() -> None:
    m = Metrics()
    s = EngineSeries(m, model="tiny", decode_method="greedy")
    collector = EngineMetrics(max_samples=1)
    collector.count_outputs(3)
    collector.count_finished(tokens=7, search_overflow=True)
    collector.count_audio(2.5)
    collector.observe_stage("streaming.encode", 0.01)
    collector.observe_stage("streaming.encode", 0.02)  # over the cap of one: dropped and counted
    # a re-decoding family's counts travel in its runner's stats, totals as well
    runner = RunnerStats(stream_passes_shed_total=2, stream_passes_late_total=3, stream_passes_skipped_total=5,
                         stream_passes_total=2,
                         stream_encoded_seconds_total=10.0, speech_recovered_seconds_total=2.0,
                         speech_uncovered_seconds_total=0.25)
    assert s.export(collector.drain(), runner, running=0, waiting=0) == (2, 3)  # shed and late since the last
    assert s.export(collector.drain(), runner, running=0, waiting=0) == (0, 0)  # nothing new: nothing added
    collector.count_outputs(1)
    s.export(collector.drain(), runner, running=0, waiting=0)
    assert _value(m, "oasr_engine_outputs_total") == 4
    assert _value(m, "oasr_engine_tokens_generated_total") == 7
    assert _value(m, "oasr_engine_search_overflow_total") == 1
    assert _value(m, "oasr_engine_audio_seconds_total") == 2.5
    assert _value(m, "oasr_engine_metric_samples_dropped_total") == 1
    assert _value(m, "oasr_engine_stream_passes_shed_total") == 2
    assert _value(m, "oasr_engine_stream_passes_late_total") == 3
    assert _value(m, "oasr_engine_stream_passes_skipped_total") == 5
    assert _value(m, "oasr_engine_stream_passes_total") == 2
    assert _value(m, "oasr_engine_stream_encoded_seconds_total") == 10.0
    assert _value(m, "oasr_engine_speech_recovered_seconds_total") == 2.0
    assert _value(m, "oasr_engine_speech_uncovered_seconds_total") == 0.25
    assert _value(m, "oasr_engine_stage_host_seconds_count", stage="streaming.encode") == 1


def test_runner_gauges_kv_blocks_only_with_a_block_pool() -> None:
    m = Metrics()
    s = EngineSeries(m, model="tiny", decode_method="greedy")
    s.export(EngineMetrics().drain(), RunnerStats(decode_slots_used=2, decode_slots_capacity=8), running=2,
             waiting=1)
    assert _value(m, "oasr_engine_kv_blocks_capacity") is None  # no pool: absent, not 0
    assert (_value(m, "oasr_engine_decode_slots_in_use"), _value(m, "oasr_engine_decode_slots_capacity")) == (2, 8)
    assert (_value(m, "oasr_engine_running"), _value(m, "oasr_engine_waiting")) == (2, 1)
    s.export(EngineMetrics().drain(), RunnerStats(kv_blocks_used=12, kv_blocks_capacity=16, kv_exhausted_total=2),
             running=0, waiting=0)
    s.export(EngineMetrics().drain(), RunnerStats(kv_blocks_used=4, kv_blocks_capacity=16, kv_exhausted_total=3),
             running=0, waiting=0)
    assert (_value(m, "oasr_engine_kv_blocks_used"), _value(m, "oasr_engine_kv_blocks_capacity")) == (4, 16)
    assert _value(m, "oasr_engine_kv_pool_usage_ratio") == 0.25
    assert _value(m, "oasr_engine_kv_exhausted_total") == 3


def test_batch_size_and_queue_wait_are_labelled_by_mode() -> None:
    m = Metrics()
    s = EngineSeries(m, model="tiny", decode_method="greedy")
    collector = EngineMetrics()
    collector.observe_batch("offline", 3, [0.5, 0.5, 0.5])
    collector.observe_batch("streaming", 2)
    collector.observe_padding(padded_length=4.0, useful_length=3.0)
    s.export(collector.drain(), RunnerStats(), running=0, waiting=0)
    assert _value(m, "oasr_engine_batch_size_bucket", mode="offline", le="2.0") == 0
    assert _value(m, "oasr_engine_batch_size_bucket", mode="offline", le="4.0") == 1
    assert _value(m, "oasr_engine_batch_size_sum", mode="streaming") == 2
    assert _value(m, "oasr_engine_queue_wait_seconds_count", mode="offline") == 3
    assert _value(m, "oasr_engine_queue_wait_seconds_count", mode="streaming") is None
    assert _value(m, "oasr_engine_batch_padding_ratio_sum") == 0.25


def test_batch_size_buckets_are_powers_of_two() -> None:
    m = Metrics()
    _observe_every_metric(m)
    families = _families(m.render()[0].decode())
    bounds = [s[1]["le"] for s in families["oasr_engine_batch_size"] if s[0].endswith("_bucket")]
    assert bounds == [*(f"{float(b)}" for b in BATCH_SIZE_BUCKETS), "+Inf"]
    assert BATCH_SIZE_BUCKETS == (1, 2, 4, 8, 16, 32, 64, 128)


async def test_a_lagging_reader_drops_partials_and_defers_the_terminal() -> None:
    m = Metrics()
    s = EngineSeries(m, model="tiny", decode_method="greedy")
    stream = OutputStream("r", s)
    stream.put(RequestOutput("r", text="a"))
    stream.put(RequestOutput("r", text="a b"))  # folded into the queued partial: dropped
    stream.put(RequestOutput("r", text="a b c", finished=True, finish_reason="stop"))  # queued behind: deferred
    assert (_value(m, "oasr_events_dropped_total"), _value(m, "oasr_events_deferred_total")) == (1, 1)
    assert [(await stream.get()).text for _ in range(2)] == ["a b", "a b c"]
    prompt = OutputStream("p", s)
    prompt.put(RequestOutput("p", text="x", finished=True, finish_reason="stop"))  # nothing queued: neither
    assert (_value(m, "oasr_events_dropped_total"), _value(m, "oasr_events_deferred_total")) == (1, 1)
    await asyncio.sleep(0)


def test_two_instances_coexist_with_separate_values() -> None:
    a, b = Metrics(), Metrics()
    a.http_requests.labels(method="GET", route="/x", status="200").inc(5)
    b.http_requests.labels(method="GET", route="/x", status="200").inc(1)
    labels = {"method": "GET", "route": "/x", "status": "200"}
    assert a.registry.get_sample_value("oasr_http_requests_total", labels) == 5
    assert b.registry.get_sample_value("oasr_http_requests_total", labels) == 1


def test_build_info_keeps_one_series() -> None:
    m = Metrics()
    m.set_build_info("0.1.0", "a")
    m.set_build_info("0.1.0", "b")
    samples = _families(m.render()[0].decode())["oasr_build_info"]
    assert samples == [("oasr_build_info", {"version": "0.1.0", "model": "b"}, 1.0)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU series exist only on CUDA")
def test_gpu_memory_is_sampled_on_cuda() -> None:
    m = Metrics()
    s = EngineSeries(m, model="tiny", decode_method="greedy", device=torch.device("cuda"))
    s.beat()
    _free, total = torch.cuda.mem_get_info()
    assert _value(m, "oasr_gpu_memory_total_bytes") == total
    used = _value(m, "oasr_gpu_memory_used_bytes")
    assert used is not None and 0 < used <= total
    utilization = _value(m, "oasr_gpu_utilization_ratio")
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert utilization is None  # absent, never a made-up 0
    else:
        assert utilization is not None and 0.0 <= utilization <= 1.0


def test_no_gpu_series_on_the_cpu() -> None:
    m = Metrics()
    s = EngineSeries(m, model="tiny", decode_method="greedy", device=torch.device("cpu"))
    s.beat()
    assert not {n for n in m.names() if n.startswith("oasr_gpu_")}
