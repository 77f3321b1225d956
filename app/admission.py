"""Admission: whether one engine takes new work now, one permit per admitted request or session,
and one refusal type every surface renders.

    async with service.admission.admit(live=True) as permit:   # or raises Refused
        ...

`Refused` is an `ApiError` (503, Retry-After): HTTP routes answer it as any error, gRPC turns it
into RESOURCE_EXHAUSTED / UNAVAILABLE with `grpc-retry-pushback-ms`, the WebSocket routes deny the
upgrade with it (Deepgram's `/v1/listen` in its own envelope); a surface never re-types a reason.

Offline work is judged by its expected queue delay (app/backlog.py) against
`max_queue_delay_secs`. Live sessions are judged by cadence, in a slow start (`LiveGate`): the
engine is never asked how much one session costs on average (with batching one more stream costs
far less than the average, and one stream alone on an idle engine reads as 64 % of it), it is
watched for whether the sessions it holds keep their cadence. Sessions admitted lately are on
probation until an engine step that began LIVE_PROVE_S after their admission has shed no pass; at most as many are on probation as are proven (LIVE_START at first), so the admitted number can double every LIVE_PROVE_S while
no pass is shed, and a shed pass (the engine behind its streams' cadence) stops admission for
LIVE_SETTLE_S and marks the level it broke at: past it, one session at a time is tried.

A session costs the engine little until it speaks (its passes over silence decode a few tokens),
so in a burst the slow start alone learns too late: sessions arrive faster than they show their
cost. The gate therefore also counts every session admitted lately whose stream has not spoken
yet (no pass of it has run over speech the VAD hears, or decoded text) at the measured marginal
cost of a speaking stream (app/backlog.py `live_cost`, the slope of the live share over the
streams that spoke, at most their average share) and admits a new one only while the live share
now (`live_share_now`, its last sample while it rises) plus that cost for each of them and the new
one stays within LIVE_MAX_SHARE, from the LIVE_START sessions the slow start trusts on (a line
fitted over a few streams on a loaded machine can say anything). A share sampled at the whole
engine refuses outright: it is capped there, so it says nothing of what one more stream costs.

A live session refused only for what the sessions admitted lately have not shown yet (the
projection over those not spoken, or the probation) waits on its upgrade up to LIVE_ADMIT_WAIT_S
before it is refused (`take_live`): their cost shows within seconds, and in a burst the estimate
is roughest just then. Refusals for late or shed passes, permits or draining do not wait.

Event-loop only (the bridge feeds it from its dispatch), so no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from app.backlog import LIVE_RETRY_AFTER_S, Backlog
from app.errors import ApiError

LIVE_START = 8
"""Live sessions admitted on trust before any has proven itself (the first round of a slow
start): a burst opened 0.25 s apart brings about six within one LIVE_PROVE_S."""
LIVE_PROVE_S = 1.5
"""Seconds an admitted live session runs without the engine shedding a pass before it counts as
held at cadence: its first pass is due after one pass period of audio (0.5 s at Whisper's
defaults), and a pass waiting longer than one more period is shed (engine/models/whisper/
stream_passes.py), so a session the engine cannot hold shows within this."""
LIVE_LATE_HOLD_S = 2.0
"""Seconds no new live session is admitted after the engine started a live pass late (it waited
three quarters of its pass period to be encoded, engine/models/whisper/window.py): the engine is
near its streams' cadence, and the sessions it admitted lately have not shown their full cost yet
(a session costs nothing until it speaks). Late passes come before shed ones: the gate stops while
the sessions it holds still keep their cadence, not after they lost it."""
LIVE_MAX_SHARE = 1.1
"""Projected share of the engine's time (app/backlog.py `live_share_now`, fed by its stage timers)
past which no new live session is admitted: the share now, plus the measured marginal cost of a
stream (`live_cost`, the slope of the share over the streams that speak, at most their average) for every session
admitted lately that has not spoken yet, and for the new one. A tenth over the whole engine: a
Whisper stream re-decodes its window at every pass, so the streams fill the engine's time well
before they lose their cadence (the measured share saturates, 0.98 at 16 sessions on the 2-core
Xeon with a median partial gap of 0.72-0.80 s), the line fitted over a burst's first speakers is
steeper than the margin (one stream alone reads 0.6; 1-2 s into a 16-session burst the slope was
0.10 a stream, 0.028 once all spoke), and past the engine's time the late and shed passes stop
admission anyway. At 1.0 the 16th of 16 sessions was refused in three of six runs (projected
101-183 %) with the 15 admitted at a 0.77-0.80 s gap; at 1.1 all 16 were admitted in two of two
(gap 0.83 and 0.97 s), and a 48-session burst still stopped at 15 (benchmarks/streaming_capacity.py)."""
LIVE_SPEAK_WAIT_S = 10.0
"""Seconds a live session is expected to start speaking within: until then (or until its stream
speaks) it is counted at the marginal cost of a stream. A session that stays silent
longer counts as what it costs (nothing), as before it was admitted."""
LIVE_ADMIT_WAIT_S = 4.0
"""Seconds a new live session may wait on its upgrade while it would be refused only for the cost
of sessions admitted lately that has not shown yet (`Refused.unshown`). Sessions opened 0.25 s
apart on the 2-core Xeon: the 16th arrives 3.75 s in, as six streams start speaking and the live
share jumps within one sample from 0.35 to 0.8-0.9; the projection from there exceeds the bound
for two to three seconds, until the sessions admitted before it speak and the share's slope
settles (traced, benchmarks/streaming_capacity.py). With this wait 16 of 16 were admitted in four
runs of four (before it, about six arrivals in ten were admitted at once); counting a stream at the
speakers' average near the whole engine as well (a flattened line there) made the 16th wait out
even 6 s in two runs of five, so it is not done."""
LIVE_ADMIT_POLL_S = 0.25
"""How often a waiting live session asks again (the bridge reports at least this often)."""
CEILING_FORGET_S = 120.0
"""Seconds without a shed pass after which the level the engine last fell behind at is forgotten
(the machine's other load changes; a ceiling measured under it must not cap the next hour)."""


class Refused(ApiError):
    """New work refused now: HTTP 503 with Retry-After (`retry_after` None: shutting down, go to
    another replica), gRPC RESOURCE_EXHAUSTED / UNAVAILABLE with pushback, a WebSocket denial."""

    def __init__(self, reason: str, retry_after: int | None, *, status: int = 503, unshown: bool = False):
        message = reason if retry_after is None else f"{reason}; retry after {retry_after} s"
        super().__init__(status, message, retry_after=retry_after,
                         status_name=None if retry_after is None else "RESOURCE_EXHAUSTED")
        self.reason = reason
        self.unshown = unshown
        """Refused for the cost of live sessions admitted lately that has not shown yet (it shows
        within seconds): a live session may wait for it (`Admission.take_live`)."""


SHUTTING_DOWN = "server is shutting down"


class LiveGate:
    """The slow start of live sessions (module doc). Fed the engine's shed passes; asked before
    each new live session. Deterministic: time comes from `clock`."""

    def __init__(self, backlog: Backlog, clock: Callable[[], float] = time.monotonic) -> None:
        self._backlog = backlog  # it keeps when a live pass was last shed
        self._clock = clock
        self.open = 0
        """Live sessions holding a permit."""
        self._probation: dict[int, float] = {}  # permit id -> when admitted, until proven
        self.ceiling: int | None = None
        """Live sessions open when the engine last fell behind, less one (None: never, or forgotten)."""
        self._ceiling_at = -math.inf
        self.held = 0
        """Most live sessions held at cadence so far (proven, none on probation): the measured capacity."""
        self.late_at = -math.inf
        """When the engine last reported a live pass started late."""
        self.checked_at = -math.inf
        """When the last engine step reported began: a session is proven only by a step that
        began LIVE_PROVE_S after its admission, not by time alone (under load one step outlasts
        the probation, and the passes it held up are shed, so counted, at the next step's start)."""
        self.spoken = 0
        """Live streams the engine reports as having decoded speech (their cost shows in the share)."""
        self._opened: dict[int, float] = {}  # permit id -> when admitted, for every open session

    def shed(self, passes: int) -> None:
        """The engine shed `passes` live passes since the last report: the sessions open are more
        than it holds at cadence. Those on probation are judged: the level is marked."""
        if passes <= 0:
            return
        self._ceiling_at = self._clock()
        self.ceiling = max(1, self.open - 1)
        self._probation.clear()  # admitted, never shed; they count as open from now on

    def late(self, passes: int) -> None:
        """The engine started `passes` live passes late since the last report: it is near its
        streams' cadence. No new session for LIVE_LATE_HOLD_S; no level is marked (none was lost)."""
        if passes > 0:
            self.late_at = self._clock()

    def behind(self) -> bool:
        """A live pass was shed in the last LIVE_SETTLE_S."""
        return self._backlog.live_behind()

    def _settle(self) -> None:
        now = self._clock()
        for pid, admitted in list(self._probation.items()):
            if admitted + LIVE_PROVE_S <= self.checked_at:
                del self._probation[pid]
        if not self._probation:
            self.held = max(self.held, self.open)
        if self.ceiling is not None and now - self._ceiling_at >= CEILING_FORGET_S:
            self.ceiling = None

    @property
    def proven(self) -> int:
        self._settle()
        return self.open - len(self._probation)

    def limit(self) -> int:
        """Live sessions that may be open now: the proven ones doubled (at least LIVE_START), and
        past the level the engine last fell behind at, one unproven session at a time."""
        proven = self.proven
        limit = proven + max(LIVE_START, proven)
        if self.ceiling is not None:
            limit = min(limit, max(self.ceiling, proven + 1))
        return limit

    def refusal(self) -> tuple[str, int, bool] | None:
        """Why a new live session is refused now, the seconds to retry after, and whether for the
        cost of sessions admitted lately that has not shown yet (None: admit it)."""
        if self.behind():
            return ("the live sessions admitted are behind their cadence already (the engine sheds their passes)",
                    LIVE_RETRY_AFTER_S, False)
        late_for = self._clock() - self.late_at
        if late_for < LIVE_LATE_HOLD_S:
            return ("the engine runs the live sessions admitted close to their cadence (a pass waited three "
                    "quarters of its period to start)", max(1, math.ceil(LIVE_LATE_HOLD_S - late_for)), False)
        waiting = self.waiting()
        projected = self.projected_share(waiting) if self.open >= LIVE_START else None
        if projected is not None and self._backlog.live_share_now >= 1.0:
            # a share capped at the whole engine says nothing of what one more stream costs
            return ("live sessions take all of the engine's time", LIVE_RETRY_AFTER_S, False)
        if projected is not None and projected > LIVE_MAX_SHARE:
            return (f"live sessions would take about {projected:.0%} of the engine with the "
                    f"{waiting} admitted that have not spoken yet and a new one", LIVE_RETRY_AFTER_S, waiting > 0)
        if self.open + 1 > self.limit():
            return (f"{len(self._probation)} live sessions admitted lately have not shown yet that the engine keeps "
                    f"their cadence (an engine step {LIVE_PROVE_S:g} s after their admission without a pass shed)",
                    LIVE_RETRY_AFTER_S, True)
        return None

    def waiting(self) -> int:
        """Sessions admitted within LIVE_SPEAK_WAIT_S whose streams have not decoded speech yet
        (by count: the engine reports how many streams spoke, not which)."""
        recent_since = self._clock() - LIVE_SPEAK_WAIT_S
        recent = sum(1 for at in self._opened.values() if at > recent_since)
        return max(0, min(recent, self.open - self.spoken))

    def projected_share(self, waiting: int | None = None) -> float | None:
        """The live share once the sessions waiting to speak (`waiting()` unless given) and one
        more run, at the measured marginal cost of a stream (None until it is measured)."""
        waiting = self.waiting() if waiting is None else waiting
        cost = self._backlog.live_cost
        if cost is None:
            return None
        return self._backlog.live_share_now + cost * (waiting + 1)

    def admitted(self, pid: int) -> None:
        self.open += 1
        self._probation[pid] = self._opened[pid] = self._clock()

    def released(self, pid: int) -> None:
        self.open = max(0, self.open - 1)
        self._probation.pop(pid, None)
        self._opened.pop(pid, None)


@dataclass
class Permit:
    """One admitted request or live session; `release()` (idempotent) gives it back."""

    admission: Admission
    id: int
    live: bool
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission._release(self)


class Admission:
    """One engine's admission: permits (--max-inflight), the offline backlog's delay bound
    (--max-queue-delay-secs; 0 turns load admission off) and the live slow start."""

    def __init__(self, max_inflight: int = 64, max_queue_delay_secs: float = 0.0,
                 on_busy: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
                 *, streaming: bool = True, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """`streaming`: the engine advances live streams (else it holds their audio for one
        offline request at the end, and live sessions are not gated by cadence)."""
        self.max_inflight = max_inflight
        self.max_queue_delay_secs = max_queue_delay_secs
        """New offline work is refused while its expected queue delay is over this (0: never)."""
        self.backlog = Backlog(clock)
        """Offline work accepted and not finished, and the measured rate of finishing it."""
        self.live = LiveGate(self.backlog, clock)
        self.inflight = 0
        self.draining = False
        self.live_streams = 0
        """Live streams the engine held after its last reported step."""
        self._streaming = streaming
        self._on_busy = on_busy  # counts a refusal for load (oasr_requests_busy_total)
        self._ids = itertools.count()
        self._clock = clock
        self._sleep = sleep  # how a live session waits (`take_live`); tests move their clock in it

    # ---------------------------------------------------------------- what the engine reports

    def observe(self, live_seconds: float, streams: int, passes_shed: int, step_at: float | None = None,
                *, passes_late: int = 0, spoken: int | None = None) -> None:
        """One dispatch of the engine's outputs: the engine time live streams took, the live
        streams it holds (`spoken` of them have shown their cost; default: all), the live passes
        it shed and started late since the last one, and when the last step they cover began (on
        this admission's clock; default: now)."""
        self.live_streams = streams
        self.live.spoken = streams if spoken is None else spoken
        self.live.checked_at = max(self.live.checked_at, self._clock() if step_at is None else step_at)
        self.backlog.live(live_seconds, streams, passes_shed, unproven=self.live.open - self.live.proven,
                          spoken=self.live.spoken)
        self.live.shed(passes_shed)
        self.live.late(passes_late)
        if not streams and not self.live.open:
            self.backlog.live_ended()
        self.backlog.sample()

    # ---------------------------------------------------------------- decisions

    def refusal(self, *, live: bool = False, priority: int = 0, count: bool = True) -> Refused | None:
        """Why new work would be refused now, or None; `count` a real refusal as busy (not a probe)."""
        refused = self._refusal(live, priority)
        if refused is not None and count:
            self._on_busy()
        return refused

    def _refusal(self, live: bool, priority: int) -> Refused | None:
        if self.draining:
            return Refused(SHUTTING_DOWN, None)
        if self.max_queue_delay_secs > 0:
            if live and self._streaming:
                refused = self.live.refusal()
                if refused is not None:
                    why, retry_after, unshown = refused
                    return Refused(f"server is overloaded: {why}", retry_after, unshown=unshown)
            else:
                retry = self.backlog.retry_after(self.max_queue_delay_secs, priority, live_open=self.live_streams > 0)
                if retry is not None:
                    return Refused(f"server is overloaded: {self._offline_why()}", retry)
        if self.inflight >= self.max_inflight:
            return Refused("server is at capacity (--max-inflight)", self.backlog.drain_time())
        return None

    def _offline_why(self) -> str:
        delay = self.backlog.delay()
        if delay <= self.max_queue_delay_secs:  # refused for the live sessions, not for the queue
            return "the live sessions admitted take the engine's time (they go first)"
        return f"new work would wait about {delay:.0f} s (--max-queue-delay-secs {self.max_queue_delay_secs:g})"

    def offline_retry(self, priority: int = 0) -> int | None:
        """Seconds before new offline work at `priority` would be admitted on load (a probe, not
        counted; None: now). Batch jobs start only while interactive work is not being shed."""
        if self.max_queue_delay_secs <= 0:
            return None
        return self.backlog.retry_after(self.max_queue_delay_secs, priority, live_open=self.live_streams > 0)

    # ---------------------------------------------------------------- permits

    def take(self, *, live: bool = False) -> Permit:
        """A permit, or `Refused`. A live permit puts its session on probation (`LiveGate`); an
        offline one counts in the queue delay from now (`Backlog.reserve`), before its audio is
        decoded."""
        refused = self.refusal(live=live)
        if refused is not None:
            raise refused
        permit = Permit(self, next(self._ids), live)
        self.inflight += 1
        if live:
            self.live.admitted(permit.id)
        else:
            self.backlog.reserve()
        return permit

    async def take_live(self) -> Permit:
        """A live permit, or `Refused`. Refused only for the cost of sessions admitted lately that
        has not shown yet, the session waits up to LIVE_ADMIT_WAIT_S for it to show (their passes
        over speech start within seconds) before it is refused: in a burst the estimate is roughest
        in the seconds the sessions just admitted start to speak."""
        for _ in range(math.floor(LIVE_ADMIT_WAIT_S / LIVE_ADMIT_POLL_S)):
            refused = self.refusal(live=True, count=False)
            if refused is None or not refused.unshown:
                break
            await self._sleep(LIVE_ADMIT_POLL_S)
        return self.take(live=True)  # admitted, or refused (and counted) once

    @contextlib.asynccontextmanager
    async def admit(self, *, live: bool = False) -> AsyncIterator[Permit]:
        permit = await self.take_live() if live else self.take()
        try:
            yield permit
        finally:
            permit.release()

    def _release(self, permit: Permit) -> None:
        self.inflight = max(0, self.inflight - 1)
        if permit.live:
            self.live.released(permit.id)


__all__ = ["CEILING_FORGET_S", "LIVE_ADMIT_POLL_S", "LIVE_ADMIT_WAIT_S", "LIVE_LATE_HOLD_S", "LIVE_MAX_SHARE", "LIVE_PROVE_S", "LIVE_SPEAK_WAIT_S", "LIVE_START", "SHUTTING_DOWN", "Admission", "LiveGate", "Permit",
           "Refused"]
