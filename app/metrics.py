"""Every Prometheus metric the server exports, declared once.

A `Metrics` owns its own `CollectorRegistry`, so several apps (or tests) in one
process never collide on the global default registry. Create one per app, hand it
to the parts that observe, and serve `render()` at /metrics.

Label conventions:
    api      the surface: 'openai', 'realtime', 'google' (HTTP) or 'grpc'
    mode     'offline' (whole clip) or 'streaming' (live audio)
    outcome  'ok', 'error', 'cancelled', 'rejected', 'busy'
    route    the matched route pattern (e.g. '/v1/audio/transcriptions'), never the raw path,
             so a client cannot mint unbounded series
    method   HTTP verb, or the gRPC method name ('Recognize', 'StreamingRecognize')
    code     gRPC status name ('OK', 'INVALID_ARGUMENT', ...)

Names in `METRIC_NAMES` are the ones written in PromQL: counters end in `_total`;
a histogram `h` is queried as `h_bucket`, `h_sum` and `h_count`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

__all__ = [
    "AUDIO_LENGTH_BUCKETS",
    "BATCH_SIZE_BUCKETS",
    "DISPATCH_TICK_BUCKETS",
    "ENGINE_STEP_BUCKETS",
    "FIRST_PARTIAL_BUCKETS",
    "JOB_DURATION_BUCKETS",
    "METRIC_NAMES",
    "QUEUE_WAIT_BUCKETS",
    "REALTIME_FACTOR_BUCKETS",
    "REQUEST_DURATION_BUCKETS",
    "Metrics",
]

# Bucket bounds, each in the unit of its metric.
REQUEST_DURATION_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds: from a short clip on a warm GPU to a long file on a busy CPU."""
AUDIO_LENGTH_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Seconds of audio; 30 s is one Whisper window."""
FIRST_PARTIAL_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
"""Seconds from the first audio of a stream to its first partial; the default cadence is 0.5 s."""
DISPATCH_TICK_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
"""Seconds: handing outputs back should take far less than a step."""
ENGINE_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds per engine step (schedule + execute + update)."""
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
"""Requests per step; powers of two up to the largest max_batch_size we expect."""
QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds between arrival and admission; the default starvation bound is 2 s."""
JOB_DURATION_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)
"""Seconds one job attempt runs: from a short clip to hours of audio on a busy CPU."""
REALTIME_FACTOR_BUCKETS = (0.25, 0.5, 0.75, 0.9, 0.95, 1.0, 1.05, 1.25, 1.5, 2.0, 5.0, 10.0)
"""Audio seconds processed per wall second; a live stream below 1 is falling behind, so buckets are dense there."""


class Metrics:
    """The server's metrics in a registry of their own.

    Attributes are the metric objects themselves: `metrics.engine_running.set(3)`,
    `metrics.request_duration.labels(api="openai", mode="offline", outcome="ok").observe(1.2)`.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        # --- Requests, seen from the serving layer ---
        self.request_duration = Histogram(
            "oasr_request_duration_seconds",
            "Wall time of a request from arrival to its last byte, in seconds.",
            ("api", "mode", "outcome"),
            buckets=REQUEST_DURATION_BUCKETS,
            registry=r,
        )
        self.audio_seconds = Counter(
            "oasr_audio_seconds",
            "Audio received for recognition, in seconds.",
            ("api", "mode"),
            registry=r,
        )
        self.request_audio_seconds = Histogram(
            "oasr_request_audio_seconds",
            "Audio length of one request, in seconds.",
            buckets=AUDIO_LENGTH_BUCKETS,
            registry=r,
        )
        self.time_to_first_partial = Histogram(
            "oasr_time_to_first_partial_seconds",
            "Time from a stream's first audio to its first partial transcript, in seconds.",
            ("api",),
            buckets=FIRST_PARTIAL_BUCKETS,
            registry=r,
        )
        self.http_requests = Counter(
            "oasr_http_requests",
            "HTTP requests answered, by matched route pattern and status code (count).",
            ("method", "route", "status"),
            registry=r,
        )
        self.grpc_requests = Counter(
            "oasr_grpc_requests",
            "gRPC calls answered, by method and status code name (count).",
            ("method", "code"),
            registry=r,
        )

        # --- Admission ---
        self.requests_admitted = Counter(
            "oasr_requests_admitted",
            "Requests the engine accepted (count).",
            registry=r,
        )
        self.requests_rejected = Counter(
            "oasr_requests_rejected",
            "Requests refused before admission, by reason such as 'invalid' or 'unsupported' (count).",
            ("reason",),
            registry=r,
        )
        self.requests_busy = Counter(
            "oasr_requests_busy",
            "Requests refused because the server was at capacity (503 / RESOURCE_EXHAUSTED) (count).",
            registry=r,
        )
        self.requests_cancelled = Counter(
            "oasr_requests_cancelled",
            "Requests aborted before finishing, mostly client disconnects (count).",
            registry=r,
        )
        self.requests_failed = Counter(
            "oasr_requests_failed",
            "Requests that ended in an error, by stage such as 'features', 'encode' or 'decode' (count).",
            ("stage",),
            registry=r,
        )

        # --- Engine loop ---
        self.dispatch_tick = Histogram(
            "oasr_dispatch_tick_seconds",
            "Time the engine thread spends per loop tick handing outputs back to the event loop, in seconds.",
            buckets=DISPATCH_TICK_BUCKETS,
            registry=r,
        )
        self.engine_step = Histogram(
            "oasr_engine_step_seconds",
            "Duration of one engine step (schedule, execute, update), in seconds.",
            buckets=ENGINE_STEP_BUCKETS,
            registry=r,
        )
        self.engine_running = Gauge(
            "oasr_engine_running",
            "Requests the engine is currently running (count).",
            registry=r,
        )
        self.engine_waiting = Gauge(
            "oasr_engine_waiting",
            "Requests waiting for admission into a batch (count).",
            registry=r,
        )
        self.engine_batch_size = Histogram(
            "oasr_engine_batch_size",
            "Requests in one engine step's batch (count).",
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.engine_stream_batch_size = Histogram(
            "oasr_engine_stream_batch_size",
            "Live streams advanced together by one engine step's model forward (count).",
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.engine_queue_wait = Histogram(
            "oasr_engine_queue_wait_seconds",
            "Time a request waited between arrival and admission into a batch, in seconds.",
            buckets=QUEUE_WAIT_BUCKETS,
            registry=r,
        )
        self.engine_step_failures = Counter(
            "oasr_engine_step_failures",
            "Engine steps that raised; the requests in them are failed (count).",
            registry=r,
        )
        self.engine_heartbeat = Gauge(
            "oasr_engine_heartbeat_timestamp_seconds",
            "Unix time of the engine thread's last loop iteration, in seconds.",
            registry=r,
        )

        # --- Streaming ---
        self.engine_kv_exhausted = Counter(
            "oasr_engine_kv_exhausted",
            "Times a stream could not get a KV cache block because the pool was full (count).",
            registry=r,
        )
        self.engine_kv_pool_usage = Gauge(
            "oasr_engine_kv_pool_usage_ratio",
            "Fraction of KV cache blocks in use, from 0 to 1 (ratio).",
            registry=r,
        )
        self.stream_sessions_active = Gauge(
            "oasr_stream_sessions_active",
            "Live streaming sessions open now (count).",
            ("api",),
            registry=r,
        )
        self.stream_realtime_factor = Histogram(
            "oasr_stream_realtime_factor",
            "Audio seconds processed per wall second over a stream's life; below 1 it falls behind (ratio).",
            buckets=REALTIME_FACTOR_BUCKETS,
            registry=r,
        )
        self.deferred_events = Counter(
            "oasr_deferred_events",
            "Outputs merged into a pending one because a slow client's queue was full (count).",
            registry=r,
        )

        self.build_info = Gauge(
            "oasr_build_info",
            "Always 1; labels name the server version and the loaded model.",
            ("version", "model"),
            registry=r,
        )

        # --- Batch jobs (app/jobs: speech:longrunningrecognize, operations, webhooks) ---
        self.jobs = Gauge(
            "oasr_jobs",
            "Jobs in the store by state; the store is shared by every replica on one database (count).",
            ("state",),
            registry=r,
        )
        self.jobs_queue_age = Gauge(
            "oasr_jobs_queue_age_seconds",
            "Age of the oldest queued job, 0 when none waits, in seconds.",
            registry=r,
        )
        self.job_duration = Histogram(
            "oasr_job_duration_seconds",
            "Wall time of one job attempt on this replica, by outcome: succeeded, failed, released, dropped, lost (seconds).",
            ("outcome",),
            buckets=JOB_DURATION_BUCKETS,
            registry=r,
        )
        self.webhook_deliveries = Counter(
            "oasr_webhook_deliveries",
            "Webhook delivery attempts by outcome: delivered, retry (failed, will retry), failed (gave up) (count).",
            ("outcome",),
            registry=r,
        )

    def set_build_info(self, version: str, model: str) -> None:
        """Publish the one oasr_build_info series (replacing a previous one)."""
        self.build_info.clear()
        self.build_info.labels(version=version, model=model).set(1)

    def names(self) -> tuple[str, ...]:
        """Exported family names as written in PromQL, in declaration order."""
        out = []
        for family in self.registry.collect():
            # prometheus_client reports a counter's family without its '_total' suffix.
            out.append(f"{family.name}_total" if family.type == "counter" else family.name)
        return tuple(out)

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition of every metric, and its Content-Type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


METRIC_NAMES: tuple[str, ...] = Metrics().names()
"""Every exported family name; deployment tests cross-check dashboards and alert rules against it."""
