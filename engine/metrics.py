"""Engine-side metrics: what the engine alone can see, collected cheaply and drained by the server.

The engine counts (totals that only grow) and samples (observations for histograms) into one
`EngineMetrics`; the serving layer calls `drain()` after each step and exports what it gets
(seed 001, "Engine internals"). Counters cross as absolute totals, so a missed drain loses
nothing and a repeated one double-counts nothing. Each sample series is capped between two
drains; past the cap a sample is not stored but counted in `samples_dropped`, so a histogram
showing a truncated distribution says so instead of passing for a complete one. What one
family alone counts (Whisper's live passes, its speech coverage) is the runner's, reported in
its stats (`engine.runner.RunnerStats`); this collector holds what every family shares.

Stage timing (`oasr_engine_stage_host_seconds{stage}`): the engine times its own stages and runs
the model runner with this collector active, so a runner times its stages with
`with stage_timer("offline.encode"): ...` without holding a reference to the collector. Stage
names are `offline.{collate,encode,prefill,decode,advance}` and
`streaming.{schedule,allocate,features,encode,decode,finalize}`. They are host wall time: on
CUDA a forward returns before the device finishes, and the next stage that reads back pays.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

MAX_SAMPLES_PER_SERIES = 4096
"""Samples one series may buffer between two drains (a drain runs after every engine step, so
this is only reached when nobody drains)."""

STAGES = (
    "offline.collate", "offline.encode", "offline.prefill", "offline.decode", "offline.advance",
    "streaming.schedule", "streaming.allocate", "streaming.features", "streaming.encode",
    "streaming.decode", "streaming.finalize",
)  # fmt: skip


@dataclass
class MetricsSnapshot:
    """What one drain hands over: absolute totals and the samples since the previous drain."""

    outputs_total: int = 0
    """RequestOutputs returned by step()."""
    tokens_generated_total: int = 0
    """Tokens on finished outputs, counted once per request."""
    search_overflow_total: int = 0
    """Finished outputs whose decoder search hit a capacity limit (RequestOutput.search_overflow)."""
    audio_seconds_total: float = 0.0
    """Audio admitted to the engine (offline at admission, streams as fed)."""
    samples_dropped_total: int = 0
    """Samples not stored because a series was at its cap."""
    stage_seconds: dict[str, list[float]] = field(default_factory=dict)
    """stage -> host wall times (s)."""
    batch_padding_ratio: list[float] = field(default_factory=list)
    """Per admitted offline batch: padding / padded length, in [0, 1)."""
    batch_size: dict[str, list[int]] = field(default_factory=dict)
    """mode -> rows in one executed batch: 'offline' requests admitted (and encoded) together,
    'streaming' live streams one step's forward advanced together."""
    queue_wait_seconds: dict[str, list[float]] = field(default_factory=dict)
    """mode -> seconds from arrival to admission."""


class Admitted(Protocol):
    """What admission metrics read of a request."""

    streaming: bool
    arrival_time: float
    duration: float


class EngineMetrics:
    """The engine's collector. Written by the engine thread only; `drain()` is called by the same
    thread (the serving layer's engine loop), so it needs no lock."""


    def observe_admission(self, admitted: Sequence[Admitted], padded_length: float, useful_length: float,
                          now: float) -> None:
        """Requests the scheduler admitted together: queue waits, and one offline batch."""
        streams = [r for r in admitted if r.streaming]
        if streams:  # their batch size is counted where they run together (step)
            self.observe_queue_waits("streaming", [now - r.arrival_time for r in streams])
        offline = [r for r in admitted if not r.streaming]
        if offline:  # admitted together, encoded together: one offline batch
            self.observe_batch("offline", len(offline), [now - r.arrival_time for r in offline])
            self.count_audio(sum(r.duration for r in offline))
            self.observe_padding(padded_length, useful_length)

    def __init__(self, max_samples: int = MAX_SAMPLES_PER_SERIES) -> None:
        self.max_samples = max_samples
        self._totals = MetricsSnapshot()
        self._pending = MetricsSnapshot()

    # ---- counting ----

    def count_outputs(self, n: int) -> None:
        self._totals.outputs_total += n

    def count_finished(self, tokens: int, search_overflow: bool) -> None:
        self._totals.tokens_generated_total += tokens
        self._totals.search_overflow_total += int(search_overflow)

    def count_audio(self, seconds: float) -> None:
        self._totals.audio_seconds_total += seconds

    # ---- sampling ----

    def _append(self, series: list, value: float | int) -> None:  # type: ignore[type-arg]
        if len(series) >= self.max_samples:  # the cap is checked before the append
            self._totals.samples_dropped_total += 1
            return
        series.append(value)

    def observe_stage(self, stage: str, seconds: float) -> None:
        self._append(self._pending.stage_seconds.setdefault(stage, []), seconds)

    def observe_batch(self, mode: str, size: int, queue_waits: Sequence[float] = ()) -> None:
        self._append(self._pending.batch_size.setdefault(mode, []), size)
        self.observe_queue_waits(mode, queue_waits)

    def observe_queue_waits(self, mode: str, queue_waits: Sequence[float]) -> None:
        if not queue_waits:
            return
        waits = self._pending.queue_wait_seconds.setdefault(mode, [])
        for wait in queue_waits:
            self._append(waits, wait)

    def observe_padding(self, padded_length: float, useful_length: float) -> None:
        if padded_length > 0:
            self._append(self._pending.batch_padding_ratio, 1.0 - useful_length / padded_length)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.observe_stage(name, time.perf_counter() - start)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Make this the collector `stage_timer` records into (while the runner executes)."""
        token = _active.set(self)
        try:
            yield
        finally:
            _active.reset(token)

    # ---- handing over ----

    def drain(self) -> MetricsSnapshot:
        """Totals so far and the samples since the last drain (which are then forgotten)."""
        pending, self._pending = self._pending, MetricsSnapshot()
        t = self._totals
        pending.outputs_total = t.outputs_total
        pending.tokens_generated_total = t.tokens_generated_total
        pending.search_overflow_total = t.search_overflow_total
        pending.audio_seconds_total = t.audio_seconds_total
        pending.samples_dropped_total = t.samples_dropped_total
        return pending


_active: contextvars.ContextVar[EngineMetrics | None] = contextvars.ContextVar("oasr_engine_metrics", default=None)


@contextlib.contextmanager
def stage_timer(name: str) -> Iterator[None]:
    """Time a stage of the running step into the active collector (a no-op outside a step)."""
    collector = _active.get()
    if collector is None:
        yield
        return
    with collector.stage(name):
        yield


@contextlib.contextmanager
def shared_stage_timer(stage: str, live_fraction: float) -> Iterator[None]:
    """Time a stage whose one batch serves live streams and offline requests together: its time
    goes to `streaming.<stage>` and `offline.<stage>` in proportion (`live_fraction`, the live
    rows' or frames' share), so the server's measure of the engine time live streams take
    (app/backlog.py) sees them in a mixed batch too. A no-op outside a step."""
    collector = _active.get()
    if collector is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        if live_fraction > 0:
            collector.observe_stage(f"streaming.{stage}", seconds * live_fraction)
        if live_fraction < 1:
            collector.observe_stage(f"offline.{stage}", seconds * (1 - live_fraction))


__all__ = ["MAX_SAMPLES_PER_SERIES", "STAGES", "EngineMetrics", "MetricsSnapshot", "shared_stage_timer",
           "stage_timer"]

