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

Event-loop only (the bridge calls it from its dispatch), so no lock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

RATE_TAU_S = 10.0
"""Seconds over which the throughput estimate forgets older measurements (exponential smoothing)."""
MIN_SAMPLE_S = 0.5
"""Shortest interval one throughput (or live-share) sample spans: outputs of one step arrive together."""
LIVE_TAU_S = 2.0
"""Seconds over which the live share of engine time forgets older measurements: short, so live
load shows at once, long enough to even out a burst of finals."""
LIVE_ADMIT_SHARE = 0.9
"""A new live session is refused when the live streams open, with it (and those admitted lately,
`live_projection`), would take this fraction of the engine's time or more: past it the engine has
under a tenth of its time left, about what one more session takes at the 16-session point. The
projection, not this bound, is what stops a burst (benchmarks/overload.py, 2-core VM: 11 of 16
sessions admitted at 0.9 and at 0.8 alike; 29 at 0.9 on the measured share alone)."""
LIVE_SETTLE_S = 10.0
"""Seconds a newly admitted live session is counted at the measured per-session cost on top of the
measured share: the share reflects a session only after LIVE_TAU_S, and a Whisper session's passes
grow to their steady window over several seconds, so a burst of openings measured by the share alone
is admitted far past capacity (measured: 44 sessions on top of 8 in benchmarks/overload.py)."""
LIVE_COST_MIN_STREAMS = 4
"""Fewest live streams a per-session cost is measured on: Whisper batches the passes of many
streams into one encode and one decode, so with one or two open a session's average share (64 %
for one stream alone on a 2-core VM) says little about what one more adds."""
LIVE_RETRY_AFTER_S = 10
"""Retry-After (s) of a refused live session: live sessions last minutes, so the share falls
slowly; ten seconds is several re-measurements (LIVE_TAU_S), and a client may try another replica."""
MAX_LIVE_SHARE = 0.95
"""Most of the engine's time counted as live (fraction): offline work is always counted on to
get the rest, so the delay stays finite (and past the limit) however much the streams take. At
this share or above, new offline work is refused even with nothing queued ahead of it."""


@dataclass
class _Work:
    seconds: float
    priority: int
    added: float
    done: float = 0.0


def live_engine_seconds(stage_seconds: Mapping[str, Sequence[float]]) -> float:
    """Engine time (s) live streams took, from one drain's stage timings (engine/metrics.py): the
    `streaming.*` stages. A batch mixing offline windows and live passes is timed as offline
    (Whisper), so under mixed load this is a floor."""
    return sum(sum(times) for stage, times in stage_seconds.items() if stage.startswith("streaming."))


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
        self.live_cost: float | None = None
        """Measured share of engine time one live stream takes (the share over the streams open),
        smoothed over LIVE_TAU_S; None until a sample with streams open."""
        self._live_streams = 0  # live streams open at the engine, as last reported
        self._behind_at = -math.inf  # when the engine last shed live passes (behind their cadence)
        self._admitted: list[float] = []  # when live sessions were admitted, the last LIVE_SETTLE_S

    @property
    def seconds(self) -> float:
        """Audio-seconds accepted and not yet transcribed."""
        return sum(max(0.0, w.seconds - w.done) for w in self._work.values())

    def add(self, request_id: str, seconds: float, priority: int = 0) -> None:
        now = self._clock()
        if not self._work:
            self._since, self._progress, self._live_in_sample = now, 0.0, 0.0
        self._work[request_id] = _Work(seconds, priority, now)

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

    def live(self, engine_seconds: float, streams: int = 0, passes_shed: int = 0) -> None:
        """Engine time (s) live streams took in the steps whose outputs are being reported, how
        many live streams the engine holds now, and how many of their passes it shed for being
        behind their cadence (call before `sample()`)."""
        if self._live_streams and not streams:
            self._admitted.clear()  # every session ended: the ones admitted lately too
            self._behind_at = -math.inf
        if passes_shed > 0:
            self._behind_at = self._clock()
        self._live_streams = streams
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
            if self._live_streams >= LIVE_COST_MIN_STREAMS and self._live > 0:
                cost = share / self._live_streams
                self.live_cost = cost if self.live_cost is None else self.live_cost + weight * (cost - self.live_cost)
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
        ahead = [w for w in self._work.values() if w.priority <= priority]
        left = sum(max(0.0, w.seconds - w.done) for w in ahead)
        if not left:
            return 0.0
        if self.rate:
            # the sessions admitted lately count at their measured cost already: live work goes
            # first, so work admitted now would wait behind them once their passes run
            share = max(self.current_live_share(), self.live_projection(streams_open=self._live_streams > 0))
            return left / (self.rate * (1.0 - min(share, MAX_LIVE_SHARE)))
        return self._clock() - min(w.added for w in ahead)

    def current_live_share(self) -> float:
        """The live share as last measured. It changes only when live time is reported (the
        engine's bridge reports at least every quarter second while streams run, and once a
        second while the engine idles), so a long step holds it rather than reading as idle."""
        return self.live_share

    def live_behind(self) -> bool:
        """The engine shed live passes in the last LIVE_SETTLE_S: the streams open already take
        more than it has, whatever the measured share says (the share counts the engine thread's
        stage timers only: an encoder thread beside it, or time no stage names, escapes it, so a
        saturated engine can read 0.75 and its cost per stream fall as streams are added)."""
        return self._clock() - self._behind_at < LIVE_SETTLE_S

    def admit_live(self) -> None:
        """A live session was admitted: counted in `live_projection` until it has settled."""
        self._admitted.append(self._clock())

    def live_projection(self, *, streams_open: bool = True) -> float:
        """The live share expected once the sessions admitted in the last LIVE_SETTLE_S run at
        the measured per-session cost: the measured share (believed only while `streams_open`),
        plus that cost for each of them (before any cost is measured, the share alone)."""
        cutoff = self._clock() - LIVE_SETTLE_S
        self._admitted = [t for t in self._admitted if t > cutoff]
        return (self.live_share if streams_open else 0.0) + (self.live_cost or 0.0) * len(self._admitted)

    def drain_time(self) -> int:
        """Whole seconds (at least 1) for the work now queued to be done at the measured rate: a
        client refused for lack of a permit is told to come back then."""
        return max(1, math.ceil(self.delay()))

    def retry_after(self, limit: float, priority: int = 0, *, live_open: bool = True) -> int | None:
        """Whole seconds after which the delay should be back under `limit`, or None when it is
        under it now (admit). At least 1. `live_open`: live streams are open now; the smoothed share
        is believed only then (the last session's share must not refuse work on an engine it left)."""
        delay = self.delay(priority)
        if live_open and self.live_share >= MAX_LIVE_SHARE:
            # live streams leave offline work no engine time: even with nothing ahead of it, new
            # work would take many times its own processing time (the delay counts only the work
            # ahead), so it is refused until the share falls
            return max(LIVE_RETRY_AFTER_S, math.ceil(delay - limit))
        if delay <= limit:
            return None
        return max(1, math.ceil(delay - limit))


__all__ = ["LIVE_ADMIT_SHARE", "LIVE_COST_MIN_STREAMS", "LIVE_RETRY_AFTER_S", "LIVE_SETTLE_S", "LIVE_TAU_S", "MAX_LIVE_SHARE", "MIN_SAMPLE_S", "RATE_TAU_S", "Backlog", "live_engine_seconds"]
