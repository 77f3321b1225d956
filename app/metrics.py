"""Every Prometheus metric the server exports, declared once (seed 001, "Metrics").

A `Metrics` owns its own `CollectorRegistry`, so several apps (or tests) in one process never
collide on the global default registry. Create one per app, hand it to the parts that observe,
and serve `render()` at /metrics. Each declaration also lands in `Metrics.specs`, from which
docs/operations.md's metric tables are generated (app/metrics_doc.py), so the page cannot drift.

Metrics are grouped by who owns the clock, and that decides the labels:

    scope        owner                                         labels
    Requests     the handler, arrival -> terminal event        api, mode, outcome
    Transport    the HTTP / gRPC listener                      method, route / code, status
    Dispatcher   the engine thread and the bridge around it    engine, model, decode_method
    Engine       engine/metrics.py, drained after every step   engine, model, decode_method + a key

Only the last two name the engine (several engines in one process would collide there); their
handles are resolved once per engine by app/engine_metrics.py.

    api      'openai', 'google', 'realtime', 'grpc' (Recognize), 'grpc_streaming'
             (StreamingRecognize); batch jobs add 'jobs'
    mode     'offline' (whole clip) or 'streaming' (live audio)
    outcome  'ok', 'error' (the server's problem, a draining server's 503 included) or
             'cancelled' (the client hung up: normal, never an error)
    route    the matched route pattern (e.g. '/v1/audio/transcriptions'), never the raw path, so a
             client cannot mint unbounded series; '<unmatched>' when no route matches
    method   HTTP verb, or the gRPC method name ('Recognize', 'StreamingRecognize')
    code     gRPC status name ('OK', 'INVALID_ARGUMENT', ...)

Names in `METRIC_NAMES` are the ones written in PromQL: counters end in `_total`; a histogram
`h` is queried as `h_bucket`, `h_sum` and `h_count`. Every histogram has explicit buckets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

__all__ = [
    "AUDIO_LENGTH_BUCKETS",
    "BATCH_SIZE_BUCKETS",
    "DISPATCH_BUCKETS",
    "ENGINE_LABELS",
    "ENGINE_STEP_BUCKETS",
    "FIRST_PARTIAL_BUCKETS",
    "JOB_DURATION_BUCKETS",
    "METRIC_NAMES",
    "PADDING_RATIO_BUCKETS",
    "QUEUE_WAIT_BUCKETS",
    "REALTIME_FACTOR_BUCKETS",
    "REQUEST_DURATION_BUCKETS",
    "SCOPES",
    "SECTIONS",
    "STAGE_BUCKETS",
    "UNMATCHED_ROUTE",
    "Declared",
    "MetricSpec",
    "Metrics",
]

# Bucket bounds, each in the unit of its metric.
REQUEST_DURATION_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds: from a short clip on a warm GPU to a long file on a busy CPU."""
AUDIO_LENGTH_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Seconds of audio; 30 s is one Whisper window."""
FIRST_PARTIAL_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
"""Seconds from the first audio of a stream to its first partial; the default cadence is 0.5 s."""
DISPATCH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)
"""Seconds: from a command posted in microseconds to a tick holding a long offline batch."""
ENGINE_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds per engine step (schedule + execute + update)."""
STAGE_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds of host time in one engine stage: from a scheduling decision to a long encoder forward."""
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
"""Rows per executed batch; powers of two up to the largest max_batch_size we expect."""
PADDING_RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""Fraction of a padded offline batch that is padding; le=0 counts batches of equal lengths."""
QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds between arrival and admission; the default starvation bound is 2 s."""
JOB_DURATION_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)
"""Seconds one job attempt runs: from a short clip to hours of audio on a busy CPU."""
REALTIME_FACTOR_BUCKETS = (0.25, 0.5, 0.75, 0.9, 0.95, 1.0, 1.05, 1.25, 1.5, 2.0, 5.0, 10.0)
"""Audio seconds processed per wall second; a live stream below 1 is falling behind, so buckets are dense there."""

ENGINE_LABELS = ("engine", "model", "decode_method")
"""Labels of every dispatcher- and engine-scope metric: which engine of the process ('0'; with
several models, the model's position in OASR_MODELS), its model and the decoder it runs."""
UNMATCHED_ROUTE = "<unmatched>"
"""The `route` of an HTTP request no route pattern matches (scanners, typos)."""

Kind = Literal["counter", "gauge", "histogram"]
SECTIONS = ("Requests", "Transport", "Dispatcher", "Engine internals", "GPU", "Batch jobs", "Models", "Build")
"""Sections of docs/operations.md#metrics, in order; each metric is declared in one."""


@dataclass(frozen=True)
class MetricSpec:
    """One declared family: what docs/operations.md lists and tests check the exposition against."""

    name: str
    """As written in PromQL (a counter's with `_total`)."""
    kind: Kind
    labels: tuple[str, ...]
    help: str
    """The HELP text: what it tells you, ending in its unit."""
    section: str


@dataclass(frozen=True)
class Declared:
    """One metric family as data: the `Metrics` attribute it becomes and what to create."""

    attr: str
    kind: Kind
    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    """Histograms only: explicit bucket bounds, in the metric's unit."""


class _Declarer:
    """Creates families in one registry and records their specs under the current section."""

    def __init__(self, registry: CollectorRegistry, specs: list[MetricSpec]):
        self.registry = registry
        self.specs = specs
        self.section = SECTIONS[0]

    def _spec(self, name: str, kind: Kind, labels: Sequence[str], help: str) -> None:
        self.specs.append(MetricSpec(name, kind, tuple(labels), help, self.section))

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        self._spec(name, "counter", labels, help)
        return Counter(name.removesuffix("_total"), help, labels, registry=self.registry)

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        self._spec(name, "gauge", labels, help)
        return Gauge(name, help, labels, registry=self.registry)

    def histogram(self, name: str, help: str, labels: Sequence[str], buckets: Sequence[float]) -> Histogram:
        self._spec(name, "histogram", labels, help)
        return Histogram(name, help, labels, buckets=buckets, registry=self.registry)

    def family(self, m: Declared) -> Counter | Gauge | Histogram:
        if m.kind == "counter":
            return self.counter(m.name, m.help, m.labels)
        if m.kind == "gauge":
            return self.gauge(m.name, m.help, m.labels)
        if m.buckets is None:
            raise ValueError(f"histogram {m.name} needs explicit buckets")
        return self.histogram(m.name, m.help, m.labels, m.buckets)


REQUEST_METRICS: tuple[Declared, ...] = (
    Declared("request_duration", "histogram", "oasr_request_duration_seconds",
        "End-to-end wall time of a request, arrival to its terminal event; the number an SLO is "
        "written against (seconds).",
        ("api", "mode", "outcome"), buckets=REQUEST_DURATION_BUCKETS),
    Declared("audio_seconds", "counter", "oasr_audio_seconds_total",
        "Audio the front-end accepted, counted before the submit so audio a saturated engine refuses "
        "still reaches the denominator; rate() over request_duration_seconds_sum is RTFx (seconds).",
        ("api", "mode")),
    Declared("request_audio_seconds", "histogram", "oasr_request_audio_seconds",
        "Audio duration of one request: the utterance lengths the latency histogram is read against "
        "(seconds).",
        ("api", "mode"), buckets=AUDIO_LENGTH_BUCKETS),
    Declared("time_to_first_partial", "histogram", "oasr_time_to_first_partial_seconds",
        "The streaming SLI: first inbound audio of a stream (or turn) to its first partial transcript "
        "(seconds).",
        ("api",), buckets=FIRST_PARTIAL_BUCKETS),
    Declared("stream_sessions_active", "gauge", "oasr_stream_sessions_active",
        "Live streaming sessions open now: realtime WebSockets and StreamingRecognize calls (count).",
        ("api",)),
    Declared("stream_realtime_factor", "histogram", "oasr_stream_realtime_factor",
        "Audio seconds received per wall second over a live session's life; below 1 the stream was "
        "slower than real time (ratio).",
        (), buckets=REALTIME_FACTOR_BUCKETS),
)
"""The Requests section of docs/operations.md#metrics."""

TRANSPORT_METRICS: tuple[Declared, ...] = (
    Declared("http_requests", "counter", "oasr_http_requests_total",
        "HTTP responses by method, matched route pattern (never the request URI; '<unmatched>' when "
        "none matches) and status (count).",
        ("method", "route", "status")),
    Declared("http_request_duration", "histogram", "oasr_http_request_duration_seconds",
        "Listener-to-response wall time of an HTTP request, to its last body byte (seconds).",
        ("method", "route"), buckets=REQUEST_DURATION_BUCKETS),
    Declared("http_requests_in_flight", "gauge", "oasr_http_requests_in_flight",
        "HTTP requests being served now (count).",
        ("method", "route")),
    Declared("grpc_requests", "counter", "oasr_grpc_requests_total",
        "gRPC calls by method and canonical status name, recorded when the call really ends (at the "
        "trailer for a streaming call) (count).",
        ("method", "code")),
    Declared("grpc_request_duration", "histogram", "oasr_grpc_request_duration_seconds",
        "Wall time of a gRPC call to its terminal status, not to the response head (seconds).",
        ("method",), buckets=REQUEST_DURATION_BUCKETS),
)
"""The Transport section of docs/operations.md#metrics."""

DISPATCHER_METRICS: tuple[Declared, ...] = (
    Declared("dispatch_tick", "histogram", "oasr_dispatch_tick_seconds",
        "Wall time of one engine-thread tick: the step (which applies the queued commands) and the "
        "extract; its p99 is the worst delay a cancel, an admission or a partial can see (seconds).",
        ENGINE_LABELS, buckets=DISPATCH_BUCKETS),
    Declared("engine_step", "histogram", "oasr_engine_step_seconds",
        "Time inside ASREngine.step(): schedule, execute, update (seconds).",
        ENGINE_LABELS, buckets=ENGINE_STEP_BUCKETS),
    Declared("dispatch_admit", "histogram", "oasr_dispatch_admit_seconds",
        "Checking one command (open, feed, abort) and posting it to the engine's queue, on the event "
        "loop, where every other request's I/O waits for it (seconds).",
        ENGINE_LABELS, buckets=DISPATCH_BUCKETS),
    Declared("dispatch_extract", "histogram", "oasr_dispatch_extract_seconds",
        "The tick after the step: draining the engine's metrics and handing the step's outputs to the "
        "event loop (seconds).",
        ENGINE_LABELS, buckets=DISPATCH_BUCKETS),
    Declared("dispatch_route", "histogram", "oasr_dispatch_route_seconds",
        "Hand-off to routed: from the engine thread posting a step's outputs to each reaching its "
        "request's queue on the event loop, outside the tick (seconds).",
        ENGINE_LABELS, buckets=DISPATCH_BUCKETS),
    Declared("engine_running", "gauge", "oasr_engine_running",
        "Requests the engine is running, live streams and parked generations included (count).",
        ENGINE_LABELS),
    Declared("engine_waiting", "gauge", "oasr_engine_waiting",
        "Requests waiting for admission into a batch: the autoscaling signal, it rises before latency "
        "does (count).",
        ENGINE_LABELS),
    Declared("engine_queue_delay", "gauge", "oasr_engine_queue_delay_seconds",
        "Expected wait of new offline work before the engine starts on it: the offline backlog "
        "(audio-seconds) over the measured transcription rate, net of the engine time live streams take; "
        "admission refuses new offline work above "
        "--max-queue-delay-secs with Retry-After (seconds).",
        ENGINE_LABELS),
    Declared("engine_outputs", "counter", "oasr_engine_outputs_total",
        "RequestOutputs returned by step(), partials included (count).",
        ENGINE_LABELS),
    Declared("requests_admitted", "counter", "oasr_requests_admitted_total",
        "Requests accepted at admission (count).",
        ENGINE_LABELS),
    Declared("requests_rejected", "counter", "oasr_requests_rejected_total",
        "Requests rejected at admission: options the engine refuses, a mode it does not serve (count).",
        ENGINE_LABELS),
    Declared("requests_busy", "counter", "oasr_requests_busy_total",
        "Requests refused at the in-flight limit (--max-inflight): HTTP 503 / RESOURCE_EXHAUSTED (count).",
        ENGINE_LABELS),
    Declared("engine_step_failures", "counter", "oasr_engine_step_failures_total",
        "step() raised: the engine thread ends, every open request ends with 503 / UNAVAILABLE, "
        "/readyz and gRPC health go NOT_SERVING and the process exits 70 to be restarted; it restarts "
        "at 0 with the process, so the pod's restart count is the lasting record (count).",
        ENGINE_LABELS),
    Declared("requests_cancelled", "counter", "oasr_requests_cancelled_total",
        "Requests aborted before completion, almost always a client disconnect (count).",
        ENGINE_LABELS),
    Declared("requests_failed", "counter", "oasr_requests_failed_total",
        "Requests the engine finished with an error, by the stage that failed; the engine kept "
        "ticking, unlike a step failure (count).",
        (*ENGINE_LABELS, "stage")),
    Declared("events_dropped", "counter", "oasr_events_dropped_total",
        "A request's queue was not empty and a partial was folded into the newer one: harmless, the "
        "next partial supersedes it (count).",
        ENGINE_LABELS),
    Declared("events_deferred", "counter", "oasr_events_deferred_total",
        "A request's queue was not empty and an event that must arrive (the terminal one) queued "
        "behind the others: the client reads slower than the engine emits (count).",
        ENGINE_LABELS),
    Declared("engine_heartbeat", "gauge", "oasr_engine_heartbeat_timestamp_seconds",
        "Unix time of the engine thread's last loop iteration, busy or idle (seconds).",
        ENGINE_LABELS),
)
"""The Dispatcher section of docs/operations.md#metrics."""

ENGINE_METRICS: tuple[Declared, ...] = (
    Declared("engine_stage_host", "histogram", "oasr_engine_stage_host_seconds",
        "Host wall time per engine stage (offline.{collate,encode,prefill,decode,advance}, "
        "streaming.{schedule,allocate,features,encode,decode,finalize}); on CUDA a forward returns "
        "before the device finishes, and live passes encoded on the CPU encoder thread count their "
        "wait, so read it as where the step loop's wall clock goes (seconds).",
        (*ENGINE_LABELS, "stage"), buckets=STAGE_BUCKETS),
    Declared("engine_batch_size", "histogram", "oasr_engine_batch_size",
        "Rows in one executed batch: offline requests encoded together, or live streams one step "
        "advanced together (count).",
        (*ENGINE_LABELS, "mode"), buckets=BATCH_SIZE_BUCKETS),
    Declared("engine_batch_padding", "histogram", "oasr_engine_batch_padding_ratio",
        "Fraction of a padded offline batch that is padding, from host-side waveform lengths: whether "
        "length bucketing works (ratio).",
        ENGINE_LABELS, buckets=PADDING_RATIO_BUCKETS),
    Declared("engine_queue_wait", "histogram", "oasr_engine_queue_wait_seconds",
        "Admission to first scheduled; a rising tail with a flat tick time means saturated, not slow "
        "(seconds).",
        (*ENGINE_LABELS, "mode"), buckets=QUEUE_WAIT_BUCKETS),
    Declared("engine_kv_blocks_used", "gauge", "oasr_engine_kv_blocks_used",
        "Blocks of the paged streaming-encoder cache in use; absent on runtimes without a block pool "
        "(count).",
        ENGINE_LABELS),
    Declared("engine_kv_blocks_capacity", "gauge", "oasr_engine_kv_blocks_capacity",
        "Blocks in the paged streaming-encoder cache; absent on runtimes without a block pool (count).",
        ENGINE_LABELS),
    Declared("engine_kv_pool_usage", "gauge", "oasr_engine_kv_pool_usage_ratio",
        "kv_blocks_used / kv_blocks_capacity, for a quick look; absent without a block pool (ratio).",
        ENGINE_LABELS),
    Declared("engine_kv_exhausted", "counter", "oasr_engine_kv_exhausted_total",
        "Streams that reached their encoder-cache ceiling: finalized early with finish_reason='length' "
        "(a truncated transcript), or continued on recycled history where the family allows (count).",
        ENGINE_LABELS),
    Declared("engine_decode_slots_in_use", "gauge", "oasr_engine_decode_slots_in_use",
        "Autoregressive decode rows in flight (count).",
        ENGINE_LABELS),
    Declared("engine_decode_slots_capacity", "gauge", "oasr_engine_decode_slots_capacity",
        "Most autoregressive decode rows allowed; 0 means no ceiling applies, the family is one-shot "
        "and parks nothing (count).",
        ENGINE_LABELS),
    Declared("engine_tokens_generated", "counter", "oasr_engine_tokens_generated_total",
        "Tokens on finished outputs, counted once per request (count).",
        ENGINE_LABELS),
    Declared("engine_search_overflow", "counter", "oasr_engine_search_overflow_total",
        "Finished results whose decoder search hit a capacity limit it could not recover from, so the "
        "transcript may miss words (RequestOutput.search_overflow; each is logged) (count).",
        ENGINE_LABELS),
    Declared("engine_audio_seconds", "counter", "oasr_engine_audio_seconds_total",
        "Audio admitted to the engine; the gap to oasr_audio_seconds_total is rejection before or at "
        "admission (seconds).",
        ENGINE_LABELS),
    Declared("engine_stream_passes_shed", "counter", "oasr_engine_stream_passes_shed_total",
        "Interim passes of live streams not run because the engine was behind their cadence: a "
        "re-decoding stream (Whisper) sheds partial passes before it delays a final, and gets one "
        "pass over all its new audio once the engine catches up; a steady rate means fewer partials "
        "than whisper_stream_step_ms promises (count).",
        ENGINE_LABELS),
    Declared("engine_stream_passes_late", "counter", "oasr_engine_stream_passes_late_total",
        "Interim passes of live streams that waited three quarters of their pass period or more to be encoded: "
        "the engine nears its streams' cadence before it sheds a pass; the server admits no new "
        "live session for a moment after one (count).",
        ENGINE_LABELS),
    Declared("engine_stream_passes", "counter", "oasr_engine_stream_passes_total",
        "Passes started over live streams' windows by a re-decoding family (Whisper), finals included "
        "(an interim pass a final supersedes before it runs too): each re-encodes its stream's window. "
        "Per live stream and second it is the partial cadence the engine keeps (count).",
        ENGINE_LABELS),
    Declared("engine_stream_encoded_seconds", "counter", "oasr_engine_stream_encoded_seconds_total",
        "Audio the live passes encoded, padding included: over the streaming audio seconds fed it "
        "is how many times each second is encoded; per pass, the encoder's cost of a pass (seconds).",
        ENGINE_LABELS),
    Declared("engine_stream_passes_skipped", "counter", "oasr_engine_stream_passes_skipped_total",
        "Interim passes of live streams not run because the VAD heard no speech after what the last "
        "pass heard and every word was committed (such a pass writes nothing): the CPU a "
        "re-decoding stream (Whisper) saves over pauses (count).",
        ENGINE_LABELS),
    Declared("engine_speech_recovered_seconds", "counter", "oasr_engine_speech_recovered_seconds_total",
        "Speech the VAD heard that no decoded word covered (a window ended early or was judged "
        "silent), decoded once more from where the words end (seconds).",
        ENGINE_LABELS),
    Declared("engine_speech_uncovered_seconds", "counter", "oasr_engine_speech_uncovered_seconds_total",
        "Speech still without words after its extra decode: VAD speech missing from a transcript, "
        "or noise the VAD took for speech (seconds).",
        ENGINE_LABELS),
    Declared("engine_samples_dropped", "counter", "oasr_engine_metric_samples_dropped_total",
        "Samples the engine's collector did not keep because a series was at its cap between two "
        "drains: non-zero means a histogram here shows a truncated distribution (count).",
        ENGINE_LABELS),
)
"""The Engine internals section of docs/operations.md#metrics."""

JOB_METRICS: tuple[Declared, ...] = (
    Declared("jobs", "gauge", "oasr_jobs",
        "Jobs in the store by state; the store is shared by every replica on one database (count).",
        ("state",)),
    Declared("jobs_queue_age", "gauge", "oasr_jobs_queue_age_seconds",
        "Age of the oldest queued job, 0 when none waits, in seconds.",
        ()),
    Declared("job_duration", "histogram", "oasr_job_duration_seconds",
        "Wall time of one job attempt on this replica, by outcome: succeeded, failed, released, "
        "dropped, lost (seconds).",
        ("outcome",), buckets=JOB_DURATION_BUCKETS),
    Declared("webhook_deliveries", "counter", "oasr_webhook_deliveries_total",
        "Webhook delivery attempts by outcome: delivered, retry (failed, will retry), failed (gave up) "
        "(count).",
        ("outcome",)),
)
"""The Batch jobs section of docs/operations.md#metrics."""

MODEL_METRICS: tuple[Declared, ...] = (
    Declared("model_loaded", "gauge", "oasr_model_loaded",
        "Engines of the model (its configured name) loaded: 1 while loaded, 0 once unloaded; a model "
        "never loaded has no series (count).",
        ("model",)),
    Declared("model_loads", "counter", "oasr_model_loads_total",
        "Loads of the model: at start (the first model), on first use, and again after an unload (count).",
        ("model",)),
    Declared("model_unloads", "counter", "oasr_model_unloads_total",
        "Unloads of an idle model by reason: idle_ttl (unused for --model-ttl-secs), memory_budget "
        "(room for another under --models-memory-budget-mb) (count).",
        ("model", "reason")),
)
"""The Models section of docs/operations.md#metrics (several models per server: OASR_MODELS)."""

BUILD_METRICS: tuple[Declared, ...] = (
    Declared("build_info", "gauge", "oasr_build_info",
        "Always 1; labels name the server version and the loaded model.",
        ("version", "model")),
)
"""The Build section of docs/operations.md#metrics."""

GPU_METRICS: tuple[Declared, ...] = (
    Declared("gpu_memory_used", "gauge", "oasr_gpu_memory_used_bytes",
        "Device memory in use on the engine's GPU, sampled once a second; device-wide, not this "
        "process's (bytes).",
        ENGINE_LABELS),
    Declared("gpu_memory_total", "gauge", "oasr_gpu_memory_total_bytes",
        "Device memory of the engine's GPU (bytes).",
        ENGINE_LABELS),
    Declared("gpu_utilization", "gauge", "oasr_gpu_utilization_ratio",
        "NVML's fraction of its sampling window in which any kernel ran on the engine's GPU: a "
        "saturation hint, not SM occupancy; absent when NVML cannot be read (no nvidia-ml-py) (ratio).",
        ENGINE_LABELS),
)
"""The GPU section: declared only when the engine runs on CUDA (`Metrics.declare_gpu`)."""

SCOPES: tuple[tuple[str, tuple[Declared, ...]], ...] = (
    ("Requests", REQUEST_METRICS),
    ("Transport", TRANSPORT_METRICS),
    ("Dispatcher", DISPATCHER_METRICS),
    ("Engine internals", ENGINE_METRICS),
    ("Batch jobs", JOB_METRICS),
    ("Models", MODEL_METRICS),
    ("Build", BUILD_METRICS),
)
"""Every family the server always exports, by scope (docs/operations.md's sections, in order)."""


class Metrics:
    """The server's metrics in a registry of their own.

    Attributes are the metric families, named by `Declared.attr`: `metrics.request_duration.labels(
    api="openai", mode="offline", outcome="ok").observe(1.2)`. Dispatcher and engine families are
    observed through one engine's bound handles (app/engine_metrics.py `EngineSeries`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.specs: list[MetricSpec] = []
        self._declare = _Declarer(self.registry, self.specs)
        for section, declared in SCOPES:
            self._declare_all(section, declared)
        self.gpu_memory_used: Gauge | None = None
        self.gpu_memory_total: Gauge | None = None
        self.gpu_utilization: Gauge | None = None

    def _declare_all(self, section: str, declared: Sequence[Declared]) -> None:
        self._declare.section = section
        for m in declared:
            setattr(self, m.attr, self._declare.family(m))

    def declare_gpu(self) -> tuple[Gauge, Gauge, Gauge]:
        """Add the device families (the engine runs on CUDA) and return them: memory used, memory
        total, utilization. Idempotent."""
        if self.gpu_memory_used is None or self.gpu_memory_total is None or self.gpu_utilization is None:
            self._declare_all("GPU", GPU_METRICS)
        assert self.gpu_memory_used and self.gpu_memory_total and self.gpu_utilization
        return self.gpu_memory_used, self.gpu_memory_total, self.gpu_utilization

    def set_build_info(self, version: str, model: str) -> None:
        """Publish the one oasr_build_info series (replacing a previous one)."""
        self.build_info.clear()
        self.build_info.labels(version=version, model=model).set(1)

    def count_offline_audio(self, api: str, seconds: float) -> None:
        """A whole clip accepted for recognition (before it is submitted)."""
        self.audio_seconds.labels(api=api, mode="offline").inc(seconds)
        self.request_audio_seconds.labels(api=api, mode="offline").observe(seconds)

    def observe_grpc(self, method: str, code: str, seconds: float) -> None:
        """One finished gRPC call: its status and its duration."""
        self.grpc_requests.labels(method=method, code=code).inc()
        self.grpc_request_duration.labels(method=method).observe(seconds)

    def names(self) -> tuple[str, ...]:
        """Exported family names as written in PromQL, in declaration order."""
        return tuple(spec.name for spec in self.specs)

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition of every metric, and its Content-Type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _all_names() -> tuple[str, ...]:
    metrics = Metrics()
    metrics.declare_gpu()
    return metrics.names()


METRIC_NAMES: tuple[str, ...] = _all_names()
"""Every family name the server may export (the GPU ones only on CUDA); deployment tests
cross-check dashboards and alert rules against it."""
