"""The offline backlog: accepted work not yet transcribed, in audio-seconds, and the rate at which
the engine gets through it, measured; their ratio is the expected queue delay of new offline
work, which admission compares with `max_queue_delay_secs` (HTTP 503 + Retry-After, gRPC
RESOURCE_EXHAUSTED + grpc-retry-pushback-ms).

Why audio-seconds and a measured rate rather than a request count: a count of 64 is a second of
work for 1 s clips and an hour for meeting recordings. The rate is measured from the progress the
engine reports (Whisper's offline decoder reports every finished 30 s window; other families
report at the end), one sample per engine step's outputs (a batch that finishes together is
one measurement, however long its step took), smoothed over `RATE_TAU_S`, and measured only
while there is work, so an idle server keeps its last estimate. Before anything has been measured,
the age of the oldest outstanding request stands in for the delay, so a burst at start-up is
shed too.

Live streams share the engine with offline work and go first (engine/scheduler.py), so the time
they take is time offline work does not get. Offline progress arrives seldom (a whole batch at
its end), but every step reports the engine time its live streams took (the `streaming.*` stage
timers, `live_engine_seconds`). So the rate is measured net of live time (offline audio-seconds
per engine-second left to offline work), the live share of engine time is measured every
`MIN_SAMPLE_S`, and the delay is the work ahead over `rate × (1 - live share)`: sixteen live
sessions opening raise the estimate within a second or two, not at the next offline output.

That model misses part of the engine's time under live load (an encoder thread beside the engine
thread, offline windows batched fewer at a time), so its error is measured too: each finished
request's time to completion over what the model expected when it was added, its 90th percentile
over recent requests (`correction`, at least 1), stretches the estimate until work finishes on time.

Event-loop only (the bridge calls it from its dispatch), so no lock.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

RATE_TAU_S = 10.0
"""Seconds over which the throughput estimate forgets older measurements (exponential smoothing)."""
MIN_SAMPLE_S = 0.5
"""Shortest interval one throughput (or live-share) sample spans: outputs of one step arrive together."""
LIVE_TAU_S = 2.0
"""Seconds over which the live share of engine time forgets older measurements: short, so live
load shows at once, long enough to even out a burst of finals."""
LIVE_SETTLE_S = 10.0
"""Seconds after a shed live pass during which the live sessions count as behind their cadence:
new live sessions and new offline work are refused meanwhile (app/admission.py)."""
LIVE_COST_SAMPLES = 60
"""Live-share samples (MIN_SAMPLE_S each, so about half a minute) the marginal cost of a live
stream is fitted over."""
LIVE_RETRY_AFTER_S = 10
"""Retry-After (s) of a refused live session (and of offline work refused while live sessions are
behind): live sessions last minutes, so room frees slowly; ten seconds is LIVE_SETTLE_S, the time a
shed pass keeps admission shut, and several slow-start rounds (app/admission.py); a client may
try another replica meanwhile."""
MAX_LIVE_SHARE = 0.95
"""Most of the engine's time counted as live (fraction): offline work is always counted on to
get the rest, so the delay stays finite (and past the limit) however much the streams take. At
this share or above, new offline work is refused even with nothing queued ahead of it."""


CORRECTION_MIN_EXPECTED_S = 5.0
"""Shortest expected time to completion (s) whose outcome corrects the estimate: below it a
request's own fixed latency (one decoder step per token) outweighs the queue the estimate is about."""
CORRECTION_QUANTILE = 0.9
"""The correction tracks this quantile of finished requests' error ratios (actual over expected
time to completion), not their mean: the estimate errs both ways under live load, and admission
promises a bound on the tail, so nine in ten requests should finish within their estimate."""
CORRECTION_STEP = 0.2
"""Step of the quantile tracking: a late request raises the correction by STEP × QUANTILE, an early
or punctual one lowers it by STEP × (1 - QUANTILE) (from 2 back to 1 in 50 requests on time)."""
RESERVATION_S = 10.0
"""Seconds a reservation (offline work admitted, its audio not decoded yet) counts before it is
dropped: the upload's decoding takes well under this, and a request that failed before reaching
the engine must not hold work it never brings."""
MAX_CORRECTION = 4.0
"""Largest factor the measured error may stretch the estimate by."""


@dataclass
class _Work:
    seconds: float
    priority: int
    added: float
    done: float = 0.0
    expected: float | None = None
    """Seconds to its completion the estimate expected when it was added (None before a rate)."""


def live_engine_seconds(stage_seconds: Mapping[str, Sequence[float]]) -> float:
    """Engine time (s) live streams took, from one drain's stage timings (engine/metrics.py): the
    `streaming.*` stages. A batch mixing offline windows and live passes is timed as offline
    (Whisper), so under mixed load this is a floor."""
    return sum(sum(times) for stage, times in stage_seconds.items() if stage.startswith("streaming."))


def _slope(samples: Sequence[tuple[int, float]], previous: float | None) -> float | None:
    """The slope of the least-squares line of share over streams (at least 0; `previous` while
    the samples hold one stream count only: nothing says what one more adds)."""
    n = len(samples)
    mean_x = sum(x for x, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    var = sum((x - mean_x) ** 2 for x, _ in samples)
    return previous if var <= 0 else max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in samples) / var)


class Backlog:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._work: dict[str, _Work] = {}
        self.rate: float | None = None
        """Measured offline audio-seconds transcribed per second of engine time left to offline
        work by live streams (None until measured)."""
        self.live_share = 0.0
        """Measured fraction of engine time live streams take, smoothed over LIVE_TAU_S."""
        self._since: float | None = None  # start of the current rate sample (None while idle)
        self._progress = 0.0  # audio-seconds done since `_since`
        self._live_in_sample = 0.0  # engine seconds live streams took since `_since`
        self._live_since = clock()  # start of the current live-share sample
        self._live = 0.0  # engine seconds live streams took since `_live_since`
        self._cost_samples: deque[tuple[int, float]] = deque(maxlen=LIVE_COST_SAMPLES)  # (streams, share)
        self.live_cost: float | None = None
        """Measured marginal share of engine time one more live stream adds: the slope of the
        live share over the number of streams that have spoken, fitted over the last
        LIVE_COST_SAMPLES samples (None until they span two stream counts), and never more than
        the share a speaking stream takes on average now (`live_share_now` over them). Not the
        average itself: with batching, one more stream costs far less than the average (one
        stream alone reads 64 %). For the same reason the share is concave in the streams, so
        what one more adds is at most the average, which a line fitted over a burst's first few
        speakers can exceed (0.16 a stream over 3-6 speakers, against an average of 0.15 then
        and 0.06 once sixteen spoke: benchmarks/streaming_capacity.py)."""
        self._slope: float | None = None  # the fitted slope `live_cost` is bounded from
        self._last_share = 0.0  # the last live-share sample, unsmoothed
        self._live_streams = 0  # live streams open at the engine, as last reported
        self._unproven = 0  # live sessions admitted too lately to show in the share (app/admission.py)
        self._live_spoken = 0  # live streams whose cost shows in the share
        self.shed_at = -math.inf
        """When the engine last shed live passes (behind their cadence)."""
        self._reserved: list[float] = []  # when offline work was admitted that is not tracked yet
        self.typical_seconds = 0.0
        """Audio-seconds of an offline request, smoothed: what a reservation counts for."""
        self.correction = 1.0
        """How much longer than expected offline work has taken to finish: the CORRECTION_QUANTILE
        of recent requests' ratios of actual to expected time (1 when on time or early, at most
        MAX_CORRECTION); `delay` is stretched by it.
        Measured, not modelled: under live load the engine's time is split in ways the share
        misses (an encoder thread beside the engine thread, the batching of few offline windows),
        and on a 2-core VM uploads admitted on a 23 s estimate took 38 s (benchmarks/overload.py)."""

    @property
    def seconds(self) -> float:
        """Audio-seconds accepted and not yet transcribed."""
        return sum(max(0.0, w.seconds - w.done) for w in self._work.values())

    def add(self, request_id: str, seconds: float, priority: int = 0) -> None:
        now = self._clock()
        if not self._work:
            self._since, self._progress, self._live_in_sample = now, 0.0, 0.0
        if priority <= 0:  # batch jobs (a lower priority) take no permit and reserve nothing
            if self._reserved:
                self._reserved.pop(0)
            self.typical_seconds = seconds if not self.typical_seconds else self.typical_seconds + 0.2 * (
                seconds - self.typical_seconds)
        rate = self._offline_rate()
        expected = None if rate is None else (self._left(priority) + seconds) / rate
        self._work[request_id] = _Work(seconds, priority, now, expected=expected)

    def reserve(self) -> None:
        """Offline work was admitted whose audio is still being decoded: until it is `add`ed (or
        RESERVATION_S passes) it counts as one typical request, so that a burst admitted together
        is not admitted on the estimate of an empty queue, each unaware of the others."""
        self._reserved.append(self._clock())

    def progress(self, request_id: str, decoded_seconds: float, finished: bool) -> None:
        """An output of a tracked request: `decoded_seconds` of its audio are done (all when finished)."""
        work = self._work.get(request_id)
        if work is None:
            return
        done = work.seconds if finished else min(max(decoded_seconds, work.done), work.seconds)
        self._progress += done - work.done
        work.done = done
        if finished:
            self._work.pop(request_id, None)  # idle bookkeeping waits for sample(): its progress counts
            if work.expected is not None and work.expected >= CORRECTION_MIN_EXPECTED_S:
                late = (self._clock() - work.added) / work.expected > self.correction
                step = CORRECTION_STEP * (CORRECTION_QUANTILE if late else CORRECTION_QUANTILE - 1.0)
                self.correction = min(MAX_CORRECTION, max(1.0, self.correction + step))

    def live(self, engine_seconds: float, streams: int = 0, passes_shed: int = 0, unproven: int = 0,
             spoken: int | None = None) -> None:
        """Engine time (s) live streams took in the steps whose outputs are being reported, how
        many live streams the engine holds now (`spoken` of them have shown their cost, default
        all: the marginal cost is fitted over those), how many of their passes it shed for being
        behind their cadence, and how many live sessions were admitted too lately to show in the
        share yet (call before `sample()`)."""
        if passes_shed > 0:
            self.shed_at = self._clock()
        self._live_streams = streams
        self._live_spoken = streams if spoken is None else spoken
        self._unproven = unproven
        self._live += engine_seconds
        if self._since is not None:
            self._live_in_sample += engine_seconds

    def sample(self) -> None:
        """Close a throughput sample after a step's outputs were reported (call once per step)."""
        now = self._clock()
        span = now - self._live_since
        if span >= MIN_SAMPLE_S:
            share = min(1.0, self._live / span)
            weight = 1.0 - math.exp(-span / LIVE_TAU_S)
            self.live_share += weight * (share - self.live_share)
            self._last_share = share
            spoken = self._live_spoken
            if spoken:
                self._cost_samples.append((spoken, share))
                self._slope = _slope(self._cost_samples, self._slope)
                average = self.live_share_now / spoken
                self.live_cost = None if self._slope is None else min(self._slope, average)
            self._live_since, self._live = now, 0.0
        if self._since is not None and now - self._since >= MIN_SAMPLE_S and self._progress > 0:
            span = now - self._since
            offline_s = max(span - self._live_in_sample, (1.0 - MAX_LIVE_SHARE) * span)
            sample = self._progress / offline_s
            weight = 1.0 - math.exp(-span / RATE_TAU_S)
            self.rate = sample if self.rate is None else self.rate + weight * (sample - self.rate)
            self._since, self._progress, self._live_in_sample = now, 0.0, 0.0
        if not self._work:
            self._since = None  # idle: the rate keeps its last value

    def forget(self, request_id: str) -> None:
        """A tracked request left without being transcribed (aborted or failed)."""
        if self._work.pop(request_id, None) is not None and not self._work:
            self._since, self._progress, self._live_in_sample = None, 0.0, 0.0  # idle: the rate keeps its last value

    def delay(self, priority: int = 0) -> float:
        """Expected seconds before new work at `priority` (lower is sooner) starts being served:
        the work ahead of it over the measured rate, less the engine time live streams take;
        before a measurement, the oldest request's age. (Not the age once measured: requests
        wait out a batch's step by design, and the next batch takes them all.)"""
        left = self._left(priority)
        if not left:
            return 0.0
        rate = self._offline_rate()
        if rate is not None:
            return left / rate * self.correction
        ahead = [w.added for w in self._work.values() if w.priority <= priority]
        return self._clock() - min(ahead) if ahead else 0.0

    def _left(self, priority: int) -> float:
        """Audio-seconds outstanding at `priority` or sooner, reservations (at priority 0) included."""
        cutoff = self._clock() - RESERVATION_S
        while self._reserved and self._reserved[0] <= cutoff:
            self._reserved.pop(0)
        reserved = len(self._reserved) * self.typical_seconds if priority >= 0 else 0.0
        return reserved + sum(max(0.0, w.seconds - w.done) for w in self._work.values() if w.priority <= priority)

    def _offline_rate(self) -> float | None:
        """Offline audio-seconds per second expected now: the measured rate over the engine time
        live streams leave (None before a measurement)."""
        if not self.rate:
            return None
        # the sessions admitted lately count at the measured marginal cost already: live work
        # goes first, so work admitted now would wait behind them once their passes run
        share = max(self.current_live_share(), self.live_projection(streams_open=self._live_streams > 0))
        return self.rate * (1.0 - min(share, MAX_LIVE_SHARE))

    @property
    def live_share_now(self) -> float:
        """The live share without the smoothing's lag while it rises: the last sample's share when
        above the smoothed one (a burst of streams starting to speak shows in it a sample later,
        not LIVE_TAU_S later)."""
        return max(self.live_share, self._last_share)

    def current_live_share(self) -> float:
        """The live share as last measured. It changes only when live time is reported (the
        engine's bridge reports at least every quarter second while streams run, and once a
        second while the engine idles), so a long step holds it rather than reading as idle."""
        return self.live_share

    def live_behind(self) -> bool:
        """The engine shed live passes in the last LIVE_SETTLE_S: the streams open already take
        more than it has, whatever the measured share says (the share counts the engine thread's
        stage timers only: an encoder thread beside it, or time no stage names, escapes it, so a
        saturated engine can read 0.75)."""
        return self._clock() - self.shed_at < LIVE_SETTLE_S

    def live_ended(self) -> None:
        """Every live session ended: none is behind any more."""
        self.shed_at = -math.inf

    def live_projection(self, *, streams_open: bool = True) -> float:
        """The live share expected once the sessions admitted lately run: the measured share
        (believed only while `streams_open`) plus the measured marginal cost of each of them."""
        return (self.live_share if streams_open else 0.0) + (self.live_cost or 0.0) * self._unproven

    def drain_time(self) -> int:
        """Whole seconds (at least 1) for the work now queued to be done at the measured rate: a
        client refused for lack of a permit is told to come back then."""
        return max(1, math.ceil(self.delay()))

    def retry_after(self, limit: float, priority: int = 0, *, live_open: bool = True) -> int | None:
        """Whole seconds after which the delay should be back under `limit`, or None when it is
        under it now (admit). At least 1. `live_open`: live streams are open now; the smoothed share
        is believed only then (the last session's share must not refuse work on an engine it left)."""
        delay = self.delay(priority)
        if live_open and (self.live_share >= MAX_LIVE_SHARE or self.live_behind()):
            # live streams leave offline work no engine time, or are behind their cadence already:
            # even with nothing ahead of it, new work would take many times its own processing
            # time and slow the sessions admitted further, so it is refused until that passes
            return max(LIVE_RETRY_AFTER_S, math.ceil(delay - limit))
        if delay <= limit:
            return None
        return max(1, math.ceil(delay - limit))


__all__ = ["CORRECTION_MIN_EXPECTED_S", "CORRECTION_QUANTILE", "CORRECTION_STEP", "LIVE_COST_SAMPLES", "LIVE_RETRY_AFTER_S", "LIVE_SETTLE_S", "LIVE_TAU_S", "MAX_CORRECTION", "MAX_LIVE_SHARE", "MIN_SAMPLE_S", "RATE_TAU_S", "RESERVATION_S", "Backlog", "live_engine_seconds"]
