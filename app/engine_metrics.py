"""One engine's series: the dispatcher- and engine-scope metrics, labelled engine/model/decode_method.

Handles are resolved once, when the engine service starts, so every dispatcher counter is in the
first scrape at 0 (an alert over `rate(...)` then reads 0, not "no data"). The engine-side
collector (engine/metrics.py) is drained once per step on the engine thread and exported here:
counters cross as absolute totals and are replayed as the increase since the last drain (a missed
drain loses nothing, a repeated one double-counts nothing); samples become histogram observations.
Runner gauges and the counters a family alone keeps (KV exhaustion, Whisper's live passes and
speech coverage) come from `RunnerStats`, replayed the same way; the KV-block gauges exist only
where the family keeps a block pool. On CUDA, device memory (and, with NVML, utilization) is sampled at most once a second.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

import torch

from app.metrics import Metrics
from engine.metrics import MetricsSnapshot
from engine.runner import RunnerStats

logger = logging.getLogger(__name__)

ENGINE_NAME = "0"
"""The `engine` label of this process's engine: one engine per process (seed 001)."""
GPU_SAMPLE_INTERVAL_S = 1.0
FAILURE_STAGES = ("admission", "features", "encode", "decode", "postprocess", "engine")
"""Where a request can fail (`RequestOutput.error_stage`; 'engine' is a failed step's fail_all):
resolved at 0 up front, so a failure rate by stage reads 0 before the first failure."""


class LivePasses(NamedTuple):
    """Live passes one export saw: shed (the engine is behind its streams' cadence) and started
    late (it is close to it)."""

    shed: int
    late: int


class EngineSeries:
    """The bound handles of one engine. Observed from the engine thread (step, tick, extract, engine
    internals, heartbeat) and from the event loop (admission, route, events, cancellations)."""

    def __init__(self, metrics: Metrics, model: str, decode_method: str, device: torch.device | None = None,
                 engine: str = ENGINE_NAME):
        self.labels = {"engine": engine, "model": model, "decode_method": decode_method or "default"}
        m, labels = metrics, self.labels
        self.metrics = metrics
        # dispatcher scope
        self.tick = m.dispatch_tick.labels(**labels)
        self.step = m.engine_step.labels(**labels)
        self.admit = m.dispatch_admit.labels(**labels)
        self.extract = m.dispatch_extract.labels(**labels)
        self.route = m.dispatch_route.labels(**labels)
        self.running = m.engine_running.labels(**labels)
        self.waiting = m.engine_waiting.labels(**labels)
        self.queue_delay = m.engine_queue_delay.labels(**labels)
        self.requests_admitted = m.requests_admitted.labels(**labels)
        self.requests_rejected = m.requests_rejected.labels(**labels)
        self.requests_busy = m.requests_busy.labels(**labels)
        self.requests_cancelled = m.requests_cancelled.labels(**labels)
        self.step_failures = m.engine_step_failures.labels(**labels)
        self.events_dropped = m.events_dropped.labels(**labels)
        self.events_deferred = m.events_deferred.labels(**labels)
        self.heartbeat = m.engine_heartbeat.labels(**labels)
        # engine scope: counters and gauges every family has
        self._outputs = m.engine_outputs.labels(**labels)
        self._tokens = m.engine_tokens_generated.labels(**labels)
        self._overflow = m.engine_search_overflow.labels(**labels)
        self._audio = m.engine_audio_seconds.labels(**labels)
        self._dropped = m.engine_samples_dropped.labels(**labels)
        self._shed = m.engine_stream_passes_shed.labels(**labels)
        self._late = m.engine_stream_passes_late.labels(**labels)
        self._skipped = m.engine_stream_passes_skipped.labels(**labels)
        self._passes = m.engine_stream_passes.labels(**labels)
        self._encoded = m.engine_stream_encoded_seconds.labels(**labels)
        self._recovered = m.engine_speech_recovered_seconds.labels(**labels)
        self._uncovered = m.engine_speech_uncovered_seconds.labels(**labels)
        self._kv_exhausted = m.engine_kv_exhausted.labels(**labels)
        self._padding = m.engine_batch_padding.labels(**labels)
        self._slots_in_use = m.engine_decode_slots_in_use.labels(**labels)
        self._slots_capacity = m.engine_decode_slots_capacity.labels(**labels)
        self._seen = MetricsSnapshot()
        """The collector's totals already exported."""
        self._stats_seen = RunnerStats()
        """The runner's totals already exported."""
        for stage in FAILURE_STAGES:
            m.requests_failed.labels(**labels, stage=stage)
        self.gpu = GpuSampler(metrics, labels, device) if device is not None and device.type == "cuda" else None

    def failed(self, stage: str) -> None:
        """A request the engine finished with an error at `stage`."""
        self.metrics.requests_failed.labels(**self.labels, stage=stage).inc()

    # ------------------------------------------------------------------ engine thread

    def export(self, snapshot: MetricsSnapshot, stats: RunnerStats, running: int, waiting: int) -> LivePasses:
        """One step's drain of the engine collector and the runner's stats; returns the live passes
        it shed and started late since the last export (the server's signs that live streams are
        behind, or close to it)."""
        self.running.set(running)
        self.waiting.set(waiting)
        seen, snap = self._seen, snapshot
        _advance(self._outputs, snap.outputs_total - seen.outputs_total)
        _advance(self._tokens, snap.tokens_generated_total - seen.tokens_generated_total)
        _advance(self._overflow, snap.search_overflow_total - seen.search_overflow_total)
        _advance(self._audio, snap.audio_seconds_total - seen.audio_seconds_total)
        _advance(self._dropped, snap.samples_dropped_total - seen.samples_dropped_total)
        self._seen = MetricsSnapshot(snap.outputs_total, snap.tokens_generated_total, snap.search_overflow_total,
                                     snap.audio_seconds_total, snap.samples_dropped_total)
        m, labels = self.metrics, self.labels
        for stage, values in snap.stage_seconds.items():
            _observe_all(m.engine_stage_host.labels(**labels, stage=stage), values)
        for mode, sizes in snap.batch_size.items():
            _observe_all(m.engine_batch_size.labels(**labels, mode=mode), sizes)
        for mode, waits in snap.queue_wait_seconds.items():
            _observe_all(m.engine_queue_wait.labels(**labels, mode=mode), waits)
        _observe_all(self._padding, snap.batch_padding_ratio)
        return self._export_runner(stats)

    def _export_runner(self, stats: RunnerStats) -> LivePasses:
        """The runner's gauges, and its counters' increase since the last export; returns the
        live passes it shed and started late since then."""
        m, labels = self.metrics, self.labels
        if stats.kv_blocks_capacity:  # absent on runtimes without a block pool
            m.engine_kv_blocks_used.labels(**labels).set(stats.kv_blocks_used)
            m.engine_kv_blocks_capacity.labels(**labels).set(stats.kv_blocks_capacity)
            m.engine_kv_pool_usage.labels(**labels).set(stats.kv_usage)
        seen = self._stats_seen
        passes_shed = stats.stream_passes_shed_total - seen.stream_passes_shed_total
        _advance(self._kv_exhausted, stats.kv_exhausted_total - seen.kv_exhausted_total)
        _advance(self._shed, passes_shed)
        passes_late = stats.stream_passes_late_total - seen.stream_passes_late_total
        _advance(self._late, passes_late)
        _advance(self._skipped, stats.stream_passes_skipped_total - seen.stream_passes_skipped_total)
        _advance(self._passes, stats.stream_passes_total - seen.stream_passes_total)
        _advance(self._encoded, stats.stream_encoded_seconds_total - seen.stream_encoded_seconds_total)
        _advance(self._recovered, stats.speech_recovered_seconds_total - seen.speech_recovered_seconds_total)
        _advance(self._uncovered, stats.speech_uncovered_seconds_total - seen.speech_uncovered_seconds_total)
        self._stats_seen = stats
        self._slots_in_use.set(stats.decode_slots_used)
        self._slots_capacity.set(stats.decode_slots_capacity)
        return LivePasses(shed=passes_shed, late=passes_late)

    def beat(self, heartbeat: bool = True) -> None:
        """The engine thread looped (after a step or an idle wait); with `heartbeat` False only
        the GPU is sampled."""
        if heartbeat:
            self.heartbeat.set(time.time())
        if self.gpu is not None:
            self.gpu.sample(time.monotonic())


class GpuSampler:
    """Device memory and utilization of the engine's GPU, sampled at most once a second.

    Utilization comes from NVML (`torch.cuda.utilization`, which needs the nvidia-ml-py package);
    when NVML cannot be read the utilization series is left out (and logged once) rather than
    reported as a made-up 0."""

    def __init__(self, metrics: Metrics, labels: dict[str, str], device: torch.device):
        used, total, utilization = metrics.declare_gpu()
        self.device = device
        self.used = used.labels(**labels)
        self.total = total.labels(**labels)
        self.utilization: Any = None
        try:
            torch.cuda.utilization(device)
        except Exception as exc:  # ModuleNotFoundError (no pynvml) or an NVML error
            logger.info("oasr_gpu_utilization_ratio is not exported: NVML is unavailable (%s)", exc)
        else:
            self.utilization = utilization.labels(**labels)
        self._last = float("-inf")

    def sample(self, now: float) -> None:
        if now - self._last < GPU_SAMPLE_INTERVAL_S:
            return
        self._last = now
        free, total = torch.cuda.mem_get_info(self.device)
        self.used.set(total - free)
        self.total.set(total)
        if self.utilization is not None:
            self.utilization.set(torch.cuda.utilization(self.device) / 100.0)


def _advance(counter: Any, delta: float) -> None:
    if delta > 0:
        counter.inc(delta)


def _observe_all(histogram: Any, values: list[float] | list[int]) -> None:
    for value in values:
        histogram.observe(value)


__all__ = ["ENGINE_NAME", "FAILURE_STAGES", "EngineSeries", "GpuSampler"]
