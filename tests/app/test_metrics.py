"""app.metrics: the declared families, their labels, and per-instance registries."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from app.metrics import BATCH_SIZE_BUCKETS, METRIC_NAMES, Metrics

# The contract with dashboards and alert rules: family name (as in PromQL) -> label names.
EXPECTED_LABELS: dict[str, set[str]] = {
    "oasr_request_duration_seconds": {"api", "mode", "outcome"},
    "oasr_audio_seconds_total": {"api", "mode"},
    "oasr_request_audio_seconds": set(),
    "oasr_time_to_first_partial_seconds": {"api"},
    "oasr_http_requests_total": {"method", "route", "status"},
    "oasr_grpc_requests_total": {"method", "code"},
    "oasr_requests_admitted_total": set(),
    "oasr_requests_rejected_total": {"reason"},
    "oasr_requests_busy_total": set(),
    "oasr_requests_cancelled_total": set(),
    "oasr_requests_failed_total": {"stage"},
    "oasr_dispatch_tick_seconds": set(),
    "oasr_engine_step_seconds": set(),
    "oasr_engine_running": set(),
    "oasr_engine_waiting": set(),
    "oasr_engine_batch_size": set(),
    "oasr_engine_stream_batch_size": set(),
    "oasr_engine_queue_wait_seconds": set(),
    "oasr_engine_step_failures_total": set(),
    "oasr_engine_heartbeat_timestamp_seconds": set(),
    "oasr_engine_kv_exhausted_total": set(),
    "oasr_engine_kv_pool_usage_ratio": set(),
    "oasr_stream_sessions_active": {"api"},
    "oasr_stream_realtime_factor": set(),
    "oasr_deferred_events_total": set(),
    "oasr_build_info": {"version", "model"},
    # batch jobs (app/jobs)
    "oasr_jobs": {"state"},
    "oasr_jobs_queue_age_seconds": set(),
    "oasr_job_duration_seconds": {"outcome"},
    "oasr_webhook_deliveries_total": {"outcome"},
}


def _observe_every_metric(m: Metrics) -> None:
    m.request_duration.labels(api="openai", mode="offline", outcome="ok").observe(1.5)
    m.audio_seconds.labels(api="openai", mode="offline").inc(12.0)
    m.request_audio_seconds.observe(12.0)
    m.time_to_first_partial.labels(api="realtime").observe(0.4)
    m.http_requests.labels(method="POST", route="/v1/audio/transcriptions", status="200").inc()
    m.grpc_requests.labels(method="Recognize", code="OK").inc()
    m.requests_admitted.inc()
    m.requests_rejected.labels(reason="invalid").inc()
    m.requests_busy.inc()
    m.requests_cancelled.inc()
    m.requests_failed.labels(stage="decode").inc()
    m.dispatch_tick.observe(0.0003)
    m.engine_step.observe(0.08)
    m.engine_running.set(3)
    m.engine_waiting.set(2)
    m.engine_batch_size.observe(3)
    m.engine_stream_batch_size.observe(8)
    m.engine_queue_wait.observe(0.02)
    m.engine_step_failures.inc()
    m.engine_heartbeat.set(1_700_000_000.0)
    m.engine_kv_exhausted.inc()
    m.engine_kv_pool_usage.set(0.25)
    m.stream_sessions_active.labels(api="grpc").inc()
    m.stream_realtime_factor.observe(0.97)
    m.deferred_events.inc()
    m.set_build_info(version="0.1.0", model="whisper-tiny.en")
    m.jobs.labels(state="QUEUED").set(4)
    m.jobs_queue_age.set(12.5)
    m.job_duration.labels(outcome="succeeded").observe(30.0)
    m.webhook_deliveries.labels(outcome="delivered").inc()


def _families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """PromQL family name -> its samples (name, labels, value)."""
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        out[name] = [(s.name, s.labels, s.value) for s in family.samples]
    return out


def test_metric_names_are_exactly_the_declared_contract() -> None:
    assert len(METRIC_NAMES) == len(set(METRIC_NAMES))
    assert set(METRIC_NAMES) == set(EXPECTED_LABELS)
    assert Metrics().names() == METRIC_NAMES


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
    text = Metrics().render()[0].decode()
    helps = {line.split()[2]: line for line in text.splitlines() if line.startswith("# HELP ")}
    for name in METRIC_NAMES:
        help_line = helps[name]
        assert any(unit in help_line for unit in ("seconds", "(count)", "(ratio)", "Always 1")), help_line


def test_observed_values_reach_the_exposition() -> None:
    m = Metrics()
    _observe_every_metric(m)
    families = _families(m.render()[0].decode())
    assert ("oasr_audio_seconds_total", {"api": "openai", "mode": "offline"}, 12.0) in families[
        "oasr_audio_seconds_total"
    ]
    assert ("oasr_engine_running", {}, 3.0) in families["oasr_engine_running"]
    assert ("oasr_build_info", {"version": "0.1.0", "model": "whisper-tiny.en"}, 1.0) in families["oasr_build_info"]
    # 3 requests fall in the le=4 bucket but not in le=2.
    buckets = {s[1]["le"]: s[2] for s in families["oasr_engine_batch_size"] if s[0].endswith("_bucket")}
    assert buckets["2.0"] == 0 and buckets["4.0"] == 1


def test_batch_size_buckets_are_powers_of_two() -> None:
    m = Metrics()
    families = _families(m.render()[0].decode())
    bounds = [s[1]["le"] for s in families["oasr_engine_batch_size"] if s[0].endswith("_bucket")]
    assert bounds == [*(f"{float(b)}" for b in BATCH_SIZE_BUCKETS), "+Inf"]
    assert BATCH_SIZE_BUCKETS == (1, 2, 4, 8, 16, 32, 64, 128)


def test_two_instances_coexist_with_separate_values() -> None:
    a, b = Metrics(), Metrics()
    a.requests_admitted.inc(5)
    b.requests_admitted.inc(1)
    assert ("oasr_requests_admitted_total", {}, 5.0) in _families(a.render()[0].decode())[
        "oasr_requests_admitted_total"
    ]
    assert ("oasr_requests_admitted_total", {}, 1.0) in _families(b.render()[0].decode())[
        "oasr_requests_admitted_total"
    ]


def test_build_info_keeps_one_series() -> None:
    m = Metrics()
    m.set_build_info("0.1.0", "a")
    m.set_build_info("0.1.0", "b")
    samples = _families(m.render()[0].decode())["oasr_build_info"]
    assert samples == [("oasr_build_info", {"version": "0.1.0", "model": "b"}, 1.0)]
