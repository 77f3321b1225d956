"""Admission policy: which waiting requests join the running batch this step.

Pure policy over plain data (no torch, no engine state): the engine hands in a
snapshot of its waiting requests and free slots, and gets back the ids to admit.

Urgency is `(priority, arrival_time, request_id)` (lower is sooner). A request is
*starved* (overdue) once it has waited at least `max_wait_time`. Live streams come before offline
work whatever their priorities (issue 35: live sessions keep their cadence while offline work is
shed, and batch jobs, which carry a larger priority number, yield to both); the starvation bound
orders each kind within itself, as the reference design's scheduler does (seed 000: overdue
streams first, oldest first; a force-flushed offline batch skips the length guards). Order of
precedence within one call, up to `min(free_slots, max_batch_size)` requests:

1. streaming: live streams. Starved streams first, most urgent first. Then the rest: with
   `streaming_cohort_admit` shortest buffered audio first (`(priority, length, arrival_time,
   request_id)`), so streams admitted together hold similar backlogs and advance as one
   lockstep cohort; a waiting stream's length is the audio it has buffered, so under load this
   order is last-in, first-out, and the starvation bound is what bounds it. Without it, most
   urgent first;
2. starved offline requests, most urgent first, whatever their length, in the slots the streams
   left;
3. offline: by `policy`, in the slots left:
   - 'fcfs' takes the most urgent.
   - 'window' looks at the most urgent `ceil(max_batch_size × length_window_factor)`
     and admits a run of similar lengths (contiguous in length order) that contains
     the most urgent one, as large as fits, then with the least padding. The most
     urgent request is admitted even alone, so grouping never starves it; the
     starvation bound protects the rest.
   - 'bucket' files every offline request into an octave of length
     ([0, 1), [1, 2), [2, 4), [4, 8) ... seconds) and admits from the fullest bucket:
     the one that fills the most of the free slots, ties to the bucket holding the
     most urgent request; within it, most urgent first. It may pass over the most
     urgent request for a fuller batch of another length; the starvation bound caps
     that at `max_wait_time`.
   - 'sjf' (shortest job first) admits the shortest requests, `(priority, length,
     arrival_time, request_id)` order. Long requests wait until they starve, so under
     sustained load they finish about `max_wait_time` late and short ones never queue
     behind them.
   Every length-aware policy ('window', 'bucket', 'sjf') keeps its batch within both
   shape bounds: padded/useful <= `max_pad_ratio` and shortest/longest >=
   `length_bucket_ratio`. Its first pick is admitted even alone.

Offline work does not starve while live streams leave it a slot: every call gives it whatever
the waiting streams do not take, and its overdue requests go first there. So an offline request
waits `max_wait_time`, then only for the slots that more urgent overdue offline requests and
waiting streams fill. Only new live sessions arriving fast enough to take every free slot, call
after call, hold it back for longer: that is live overload, which the server's permit limit
bounds, and the order the issue asks for.

`preferred_batch_size` then snaps the count: when the rules above would admit `n`
requests and none is starved, the call admits exactly `p`, the largest preferred size
<= n for which the same rules (run with `p` slots) pick `p` requests; if there is no
such `p`, it admits nothing and reports the time the oldest waiting request starves
(`next_admit_time`). A starved request is the escape valve: while one waits, nothing
is snapped, so a hold lasts at most `max_wait_time`. Each hold costs up to
`max_wait_time` of latency on a draining queue, which is why it is off by default.

Once admitted, a chunked stream is stepped whenever it has a chunk ready; `pick_streams` chooses
which of the ready ones one step advances: least recently advanced first, up to
`max_batch_size`, so a stream left out of a full step goes first in the next one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from engine.config import EngineConfig

__all__ = ["POLICIES", "Scheduler", "SchedulerOutput", "WaitingRequest", "length_bucket", "pick_streams"]

Policy = Literal["fcfs", "window", "bucket", "sjf"]
POLICIES: tuple[Policy, ...] = ("fcfs", "window", "bucket", "sjf")

DEFAULT_MAX_BATCH_SIZE = 16
DEFAULT_MAX_WAIT_TIME = 2.0
"""Seconds."""
DEFAULT_LENGTH_WINDOW_FACTOR = 2.0
DEFAULT_MAX_PAD_RATIO = 4.0
DEFAULT_LENGTH_BUCKET_RATIO = 0.0
"""0 = no floor on shortest/longest; the pad-ratio cap alone bounds a batch's waste."""


def length_bucket(length: float) -> int:
    """'bucket' policy: 0 for [0, 1) s, k for [2**(k-1), 2**k) s. Octaves keep a bucket's own
    padding under 2× (under the default 4× cap) at every length; sub-second requests share
    one bucket because their padding is cheap in absolute terms."""
    return max(0, math.frexp(length)[1])


def pick_streams(last_advanced: Sequence[int], max_batch_size: int) -> list[int]:
    """The ready streams one step advances, as indices into `last_advanced` (each ready stream's
    step number when it last advanced; -1: never): least recently advanced first, ties in the
    order given (the runner's admission order), at most `max_batch_size`. A stream that does not
    fit this step has the oldest mark in the next, so every ready stream advances within
    ceil(ready / max_batch_size) steps."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    order = sorted(range(len(last_advanced)), key=last_advanced.__getitem__)  # stable: ties keep order
    return order[:max_batch_size]


@dataclass(frozen=True)
class WaitingRequest:
    """One waiting request as the scheduler sees it; the engine builds these each step."""

    request_id: str
    length: float
    """Seconds of audio: an offline request's whole input; a live stream's audio buffered so far."""
    arrival_time: float
    """time.monotonic() seconds when the request arrived."""
    priority: int = 0
    """Lower is sooner."""
    streaming: bool = False

    def urgency(self) -> tuple[int, float, str]:
        """Sort key: most urgent first; the id makes it total, so the order is deterministic."""
        return (self.priority, self.arrival_time, self.request_id)

    def shortness(self) -> tuple[int, float, float, str]:
        """Sort key: shortest first within a priority (sjf, stream cohorts); total like urgency()."""
        return (self.priority, self.length, self.arrival_time, self.request_id)


@dataclass(frozen=True)
class SchedulerOutput:
    admitted: tuple[str, ...]
    """Request ids in admission order."""
    policy: str
    """The rule that chose them: 'starved' if the starvation bound admitted any; else the
    offline policy's name when it chose the offline part; 'held' when preferred_batch_size
    held everything back; else 'fcfs'."""
    padded_length: float
    """Offline part: longest admitted length × number admitted, in seconds (streams are not padded here)."""
    useful_length: float
    """Offline part: sum of admitted lengths, in seconds."""
    held: int = 0
    """Requests the policy would have admitted but preferred_batch_size held back this call."""
    next_admit_time: float | None = None
    """Set when requests were held: the monotonic time the oldest waiting request starves and
    the hold ends. Nothing new is admitted before then unless the waiting set or free slots
    change, so an engine with no other work can block for commands until this time."""

    @property
    def pad_ratio(self) -> float:
        """padded/useful of the offline part; 1.0 when nothing (or only silence) is padded."""
        return self.padded_length / self.useful_length if self.useful_length > 0 else 1.0


class Scheduler:
    """Chooses the requests to admit each step; holds only its knobs, no request state."""

    def __init__(
        self,
        policy: str = "window",
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_wait_time: float = DEFAULT_MAX_WAIT_TIME,
        length_window_factor: float = DEFAULT_LENGTH_WINDOW_FACTOR,
        max_pad_ratio: float = DEFAULT_MAX_PAD_RATIO,
        length_bucket_ratio: float = DEFAULT_LENGTH_BUCKET_RATIO,
        preferred_batch_size: Sequence[int] = (),
        streaming_cohort_admit: bool = True,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if not max_wait_time >= 0:
            raise ValueError(f"max_wait_time must be >= 0 seconds, got {max_wait_time}")
        if not length_window_factor >= 1:
            raise ValueError(f"length_window_factor must be >= 1, got {length_window_factor}")
        if not max_pad_ratio >= 1:
            raise ValueError(f"max_pad_ratio must be >= 1, got {max_pad_ratio}")
        if not 0 <= length_bucket_ratio <= 1:
            raise ValueError(f"length_bucket_ratio must be in [0, 1], got {length_bucket_ratio}")
        bad = [p for p in preferred_batch_size if not 1 <= p <= max_batch_size]
        if bad:
            raise ValueError(f"preferred_batch_size entries must be in [1, max_batch_size={max_batch_size}], got {bad}")
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.max_wait_time = max_wait_time
        self.length_window_factor = length_window_factor
        self.max_pad_ratio = max_pad_ratio
        self.length_bucket_ratio = length_bucket_ratio
        self.preferred_batch_size = tuple(sorted(set(preferred_batch_size), reverse=True))
        """Distinct preferred sizes, largest first; empty = no snapping."""
        self.streaming_cohort_admit = streaming_cohort_admit
        self.window_size = math.ceil(max_batch_size * length_window_factor)
        """How many of the most urgent offline requests 'window' chooses among."""

    @classmethod
    def from_config(cls, config: EngineConfig) -> Scheduler:
        return cls(
            policy=config.schedule_policy,
            max_batch_size=config.max_batch_size,
            max_wait_time=config.max_wait_time,
            length_window_factor=config.length_window_factor,
            max_pad_ratio=config.max_offline_pad_ratio,
            length_bucket_ratio=config.length_bucket_ratio,
            preferred_batch_size=config.preferred_batch_size,
            streaming_cohort_admit=config.streaming_cohort_admit,
        )

    def schedule(self, waiting: Sequence[WaitingRequest], free_slots: int, now: float) -> SchedulerOutput:
        """Pick up to min(free_slots, max_batch_size) of `waiting` to admit at time `now` (monotonic seconds)."""
        ids = [w.request_id for w in waiting]
        if len(set(ids)) != len(ids):
            raise ValueError("waiting requests must have distinct request ids")
        bad = next((w for w in waiting if not w.length >= 0), None)  # also catches NaN
        if bad is not None:
            raise ValueError(f"request {bad.request_id}: length must be >= 0 seconds, got {bad.length}")
        capacity = min(max(free_slots, 0), self.max_batch_size)
        ordered = sorted(waiting, key=WaitingRequest.urgency)
        starved = [w for w in ordered if now - w.arrival_time >= self.max_wait_time]

        out = self._select(ordered, starved, capacity)
        if not self.preferred_batch_size or starved or not out.admitted:
            return out
        natural = len(out.admitted)
        for size in (p for p in self.preferred_batch_size if p <= natural):
            snapped = self._select(ordered, [], size)
            if len(snapped.admitted) == size:
                return self._held(snapped, natural - size, ordered)
        empty = SchedulerOutput(admitted=(), policy="held", padded_length=0.0, useful_length=0.0)
        return self._held(empty, natural, ordered)

    def _held(self, out: SchedulerOutput, held: int, ordered: list[WaitingRequest]) -> SchedulerOutput:
        if held == 0:
            return out
        oldest = min(w.arrival_time for w in ordered)
        return replace(out, held=held, next_admit_time=oldest + self.max_wait_time)

    def _select(self, ordered: list[WaitingRequest], starved: list[WaitingRequest], capacity: int) -> SchedulerOutput:
        """Rules 1-3 of the module docstring with `capacity` slots; `ordered` is most urgent first."""
        overdue = {w.request_id for w in starved}
        waiting_streams = [w for w in ordered if w.streaming]
        fresh = [w for w in waiting_streams if w.request_id not in overdue]
        if self.streaming_cohort_admit:
            fresh.sort(key=WaitingRequest.shortness)
        streams = ([w for w in waiting_streams if w.request_id in overdue] + fresh)[:capacity]
        slots = capacity - len(streams)
        offline = [w for w in ordered if not w.streaming]
        flushed = [w for w in offline if w.request_id in overdue][:slots]  # length guards skipped
        slots -= len(flushed)
        rest = [w for w in offline if w.request_id not in overdue]

        policy: str = self.policy
        if slots > 0 and rest and policy != "fcfs":
            chosen = {"window": self._window, "bucket": self._bucket, "sjf": self._sjf}[policy](rest, slots)
        else:
            chosen = rest[: max(slots, 0)]
            policy = "fcfs"
        if any(w.request_id in overdue for w in (*streams, *flushed)):
            policy = "starved"

        admitted = [*streams, *flushed, *chosen]
        lengths = [w.length for w in admitted if not w.streaming]
        return SchedulerOutput(
            admitted=tuple(w.request_id for w in admitted),
            policy=policy,
            padded_length=max(lengths, default=0.0) * len(lengths),
            useful_length=sum(lengths),
        )

    def _fits(self, shortest: float, longest: float, total: float, count: int) -> bool:
        """Whether a batch of `count` lengths (summing to `total`) is within both shape bounds."""
        if count <= 1 or longest == 0:  # a lone request, or all silence: nothing is padded
            return True
        return longest * count <= self.max_pad_ratio * total and shortest >= self.length_bucket_ratio * longest

    def _greedy(self, candidates: list[WaitingRequest], slots: int) -> list[WaitingRequest]:
        """Take `candidates` in order, skipping any that would break the shape bounds."""
        chosen: list[WaitingRequest] = []
        shortest, longest, total = math.inf, 0.0, 0.0
        for w in candidates:
            if len(chosen) == slots:
                break
            lo, hi, sum_ = min(shortest, w.length), max(longest, w.length), total + w.length
            if self._fits(lo, hi, sum_, len(chosen) + 1):
                chosen.append(w)
                shortest, longest, total = lo, hi, sum_
        return chosen

    def _bucket(self, offline: list[WaitingRequest], slots: int) -> list[WaitingRequest]:
        buckets: dict[int, list[WaitingRequest]] = {}
        for w in offline:  # most urgent first, so each bucket is too
            buckets.setdefault(length_bucket(w.length), []).append(w)
        fullest = min(buckets.values(), key=lambda b: (-min(len(b), slots), b[0].urgency()))
        return self._greedy(fullest, slots)

    def _sjf(self, offline: list[WaitingRequest], slots: int) -> list[WaitingRequest]:
        return self._greedy(sorted(offline, key=WaitingRequest.shortness), slots)

    def _window(self, offline: list[WaitingRequest], slots: int) -> list[WaitingRequest]:
        """The run of similar lengths to admit; `offline` is sorted most urgent first."""
        window = offline[: self.window_size]
        rank = {w.request_id: i for i, w in enumerate(window)}  # 0 = most urgent
        by_length = sorted(window, key=lambda w: (w.length, rank[w.request_id]))
        anchor = next(i for i, w in enumerate(by_length) if rank[w.request_id] == 0)

        # Largest batch first (throughput), then least padding, then the more urgent members.
        for size in range(min(slots, len(by_length)), 0, -1):
            best: tuple[float, tuple[int, ...]] | None = None
            best_run: list[WaitingRequest] = []
            for start in range(max(0, anchor - size + 1), min(anchor, len(by_length) - size) + 1):
                run = by_length[start : start + size]
                useful = sum(w.length for w in run)
                if not self._fits(run[0].length, run[-1].length, useful, size):
                    continue
                key = (run[-1].length * size - useful, tuple(sorted(rank[w.request_id] for w in run)))
                if best is None or key < best:
                    best, best_run = key, run
            if best is not None:
                return sorted(best_run, key=lambda w: rank[w.request_id])
        raise AssertionError("unreachable: a run of the most urgent request alone always fits")
