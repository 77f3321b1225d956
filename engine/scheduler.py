"""Admission policy: which waiting requests join the running batch this step.

Pure policy over plain data (no torch, no engine state): the engine hands in a
snapshot of its waiting requests and free slots, and gets back the ids to admit.

Order of precedence within one call, each group most urgent first, where urgency is
`(priority, arrival_time, request_id)` (lower is sooner):

1. starved: any request that has waited longer than `max_wait_time`;
2. streaming: live streams, first come first served (they have no length to group by);
3. offline: by `policy`, in the slots left:
   - 'fcfs' takes the most urgent;
   - 'window' looks at the most urgent `ceil(max_batch_size × length_window_factor)` and
     admits a run of similar lengths (contiguous in length order) that contains the most
     urgent one, as large as fits, then with the least padding, keeping
     padded/useful <= `max_pad_ratio`. The most urgent request is admitted even alone,
     so grouping never starves it; the starvation bound protects the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from engine.config import EngineConfig

__all__ = ["POLICIES", "Scheduler", "SchedulerOutput", "WaitingRequest"]

Policy = Literal["fcfs", "window"]
POLICIES: tuple[Policy, ...] = ("fcfs", "window")

DEFAULT_MAX_BATCH_SIZE = 16
DEFAULT_MAX_WAIT_TIME = 2.0
"""Seconds."""
DEFAULT_LENGTH_WINDOW_FACTOR = 2.0
DEFAULT_MAX_PAD_RATIO = 4.0


@dataclass(frozen=True)
class WaitingRequest:
    """One waiting request as the scheduler sees it; the engine builds these each step."""

    request_id: str
    length: float
    """Seconds of audio (0 for streaming requests)."""
    arrival_time: float
    """time.monotonic() seconds when the request arrived."""
    priority: int = 0
    """Lower is sooner."""
    streaming: bool = False

    def urgency(self) -> tuple[int, float, str]:
        """Sort key: most urgent first; the id makes it total, so the order is deterministic."""
        return (self.priority, self.arrival_time, self.request_id)


@dataclass(frozen=True)
class SchedulerOutput:
    admitted: tuple[str, ...]
    """Request ids in admission order."""
    policy: str
    """The rule that chose them: 'starved' if the starvation bound admitted any, else
    'window' when length grouping chose the offline part, else 'fcfs'."""
    padded_length: float
    """Offline part: longest admitted length × number admitted, in seconds (streams have no length)."""
    useful_length: float
    """Offline part: sum of admitted lengths, in seconds."""

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
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.max_wait_time = max_wait_time
        self.length_window_factor = length_window_factor
        self.max_pad_ratio = max_pad_ratio
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

        starved = [w for w in ordered if now - w.arrival_time > self.max_wait_time][:capacity]
        starved_ids = {w.request_id for w in starved}
        rest = [w for w in ordered if w.request_id not in starved_ids]
        streams = [w for w in rest if w.streaming][: capacity - len(starved)]
        offline = [w for w in rest if not w.streaming]
        slots = capacity - len(starved) - len(streams)

        if slots > 0 and offline and self.policy == "window":
            chosen = self._window(offline, slots)
            policy = "window"
        else:
            chosen = offline[: max(slots, 0)]
            policy = "fcfs"
        if starved:
            policy = "starved"

        admitted = [*starved, *streams, *chosen]
        lengths = [w.length for w in admitted if not w.streaming]
        return SchedulerOutput(
            admitted=tuple(w.request_id for w in admitted),
            policy=policy,
            padded_length=max(lengths, default=0.0) * len(lengths),
            useful_length=sum(lengths),
        )

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
                padded = run[-1].length * size
                # A lone request is never over the cap; all-silent runs pad nothing.
                if size > 1 and useful > 0 and padded > self.max_pad_ratio * useful:
                    continue
                key = (padded - useful, tuple(sorted(rank[w.request_id] for w in run)))
                if best is None or key < best:
                    best, best_run = key, run
            if best is not None:
                return sorted(best_run, key=lambda w: rank[w.request_id])
        raise AssertionError("unreachable: a run of the most urgent request alone always fits")
