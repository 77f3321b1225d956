"""Admission (app/admission.py): the live slow start on synthetic engine reports and a clock the
test moves, permits, and the one refusal type."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from app.admission import (
    CEILING_FORGET_S,
    LIVE_LATE_HOLD_S,
    LIVE_MAX_SHARE,
    LIVE_PROVE_S,
    LIVE_SPEAK_WAIT_S,
    LIVE_START,
    Admission,
    Permit,
    Refused,
)
from app.backlog import LIVE_RETRY_AFTER_S, LIVE_SETTLE_S


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admission(clock: Clock, **kw: float) -> Admission:
    return Admission(max_inflight=int(kw.get("max_inflight", 1000)), max_queue_delay_secs=30.0, clock=clock)


def admit_all(a: Admission, limit: int = 1000) -> list[Permit]:
    """Live permits until the first refusal."""
    permits: list[Permit] = []
    while len(permits) < limit and a.refusal(live=True, count=False) is None:
        permits.append(a.take(live=True))
    return permits


def prove(a: Admission, clock: Clock) -> None:
    """LIVE_PROVE_S of engine reports without a shed pass."""
    clock.now += LIVE_PROVE_S
    a.observe(0.1, a.live.open, 0)


def test_live_sessions_are_admitted_in_a_slow_start_that_doubles_while_no_pass_is_shed() -> None:
    clock = Clock()
    a = admission(clock)
    open_ = [len(admit_all(a))]
    for _ in range(4):
        prove(a, clock)
        admit_all(a)
        open_.append(a.live.open)
    assert open_ == [LIVE_START * 2 ** k for k in range(5)]
    assert a.live.held == LIVE_START * 8  # the most held at cadence so far (the last round is on probation)


def test_a_burst_at_four_a_second_is_admitted_while_the_engine_keeps_cadence() -> None:
    """Sessions opened 0.25 s apart (the capacity benchmark's stagger) are never refused by the
    slow start: those admitted LIVE_PROVE_S ago are proven by the time the next ones arrive."""
    clock = Clock()
    a = admission(clock)
    for _ in range(64):
        assert a.refusal(live=True, count=False) is None
        a.take(live=True)
        clock.now += 0.25
        a.observe(0.1, a.live.open, 0)
    assert a.live.open == 64


def test_a_session_is_proven_by_a_step_begun_after_its_probation_not_by_time_alone() -> None:
    """Under load one step can outlast LIVE_PROVE_S, and the passes it held up are shed (so
    counted) only at the next step's start: until a step that began LIVE_PROVE_S after a
    session's admission reports no shed pass, the session stays on probation."""
    clock = Clock()
    a = admission(clock)
    admitted_at = clock.now
    admit_all(a)
    clock.now += 4 * LIVE_PROVE_S
    a.observe(0.1, LIVE_START, 0, step_at=admitted_at + 0.1)  # a long step, begun right after
    assert a.live.proven == 0 and a.refusal(live=True, count=False) is not None
    a.observe(0.1, LIVE_START, 0, step_at=admitted_at + LIVE_PROVE_S)  # the next one shed nothing
    assert a.live.proven == LIVE_START and len(admit_all(a)) == LIVE_START


def test_an_offline_engine_does_not_gate_live_sessions_by_cadence() -> None:
    """A live session on an offline engine is held audio until its end: no pass to be shed."""
    clock = Clock()
    a = Admission(max_inflight=100, max_queue_delay_secs=30.0, clock=clock, streaming=False)
    assert len(admit_all(a, 50)) == 50


def test_a_shed_pass_stops_admission_and_past_its_level_one_session_at_a_time_is_tried() -> None:
    clock = Clock()
    a = admission(clock)
    admit_all(a)
    prove(a, clock)
    admit_all(a)  # 16 open, 8 on probation
    a.observe(0.1, 16, passes_shed=1)
    refused = a.refusal(live=True, count=False)
    assert refused is not None and refused.retry_after == LIVE_RETRY_AFTER_S
    assert "behind their cadence" in refused.message
    assert a.live.ceiling == 15
    clock.now += LIVE_SETTLE_S  # the sessions still run, no pass shed since
    a.observe(0.1, 16, 0)
    assert len(admit_all(a)) == 1  # one at a time past the level it fell behind at
    prove(a, clock)
    assert len(admit_all(a)) == 1
    clock.now += CEILING_FORGET_S
    a.observe(0.1, a.live.open, 0)
    assert a.live.ceiling is None
    proven = a.live.open
    assert len(admit_all(a)) == proven  # the slow start again: as many again as are proven


def test_a_late_pass_holds_admission_before_any_pass_is_shed_and_marks_no_level() -> None:
    """A pass that waited three quarters of its period to start says the engine nears its streams' cadence:
    a burst stops there, while the sessions held still keep it, rather than at the first shed pass."""
    clock = Clock()
    a = admission(clock)
    for _ in range(12):
        a.take(live=True)
        clock.now += 0.25
        a.observe(0.1, a.live.open, 0)
    a.observe(0.1, 12, 0, passes_late=1)
    refused = a.refusal(live=True, count=False)
    assert refused is not None and refused.retry_after == LIVE_LATE_HOLD_S  # the hold, not a shed's settling
    assert "close to their cadence" in refused.message
    assert a.live.ceiling is None and not a.live.behind()  # nothing was lost: offline work is not held up
    clock.now += LIVE_LATE_HOLD_S / 2
    a.observe(0.1, 12, 0)
    assert a.refusal(live=True, count=False) is not None  # still within the hold
    clock.now += LIVE_LATE_HOLD_S / 2
    a.observe(0.1, 12, 0)
    assert a.refusal(live=True, count=False) is None  # no pass late since: the burst goes on


def test_a_session_released_on_probation_frees_its_place() -> None:
    clock = Clock()
    a = admission(clock)
    permits = admit_all(a)
    assert len(permits) == LIVE_START
    permits[0].release()
    permits[0].release()  # idempotent
    assert a.live.open == LIVE_START - 1 and a.inflight == LIVE_START - 1
    assert len(admit_all(a)) == 1


def test_behind_ends_when_every_live_session_has_ended() -> None:
    clock = Clock()
    a = admission(clock)
    permits = admit_all(a, 2)
    a.observe(0.1, 2, passes_shed=1)
    assert a.live.behind() and a.offline_retry() == LIVE_RETRY_AFTER_S  # offline work waits for them too
    a.observe(0.0, 0, 0)  # the engine's streams ended, a session still holds its permit
    assert a.live.behind()
    for p in permits:
        p.release()
    a.observe(0.0, 0, 0)
    assert not a.live.behind() and a.offline_retry() is None


async def test_admit_yields_a_permit_or_raises_one_refusal() -> None:
    clock = Clock()
    busy: list[int] = []
    a = Admission(max_inflight=1, max_queue_delay_secs=30.0, on_busy=lambda: busy.append(1), clock=clock)
    async with a.admit() as permit:
        assert a.inflight == 1 and not permit.live
        with pytest.raises(Refused) as info:
            async with a.admit():
                pass
        assert info.value.status == 503 and info.value.retry_after == 1 and "--max-inflight" in info.value.message
    assert a.inflight == 0 and busy == [1]
    a.draining = True
    with pytest.raises(Refused) as info:
        a.take(live=True)
    assert info.value.retry_after is None and info.value.message == "server is shutting down"
    assert info.value.google_body()["error"]["status"] == "UNAVAILABLE"


def test_offline_work_over_the_queue_delay_is_refused_with_the_estimate() -> None:
    clock = Clock()
    a = admission(clock)
    a.backlog.rate = 2.0
    a.backlog.add("ahead", 100.0)  # 50 s of work ahead
    refused = a.refusal()
    assert refused is not None and refused.retry_after == 20 and "--max-queue-delay-secs" in refused.message
    assert refused.google_body()["error"]["status"] == "RESOURCE_EXHAUSTED"
    a.max_queue_delay_secs = 0  # load admission off
    assert a.refusal() is None


def test_a_burst_stops_near_capacity_before_the_sessions_admitted_have_spoken() -> None:
    """Sessions opened 0.25 s apart, each speaking (costing) only 2.5 s after its admission, on an
    engine where every speaking stream takes 6 % of its time (16 fit): the slow start alone would
    admit them all (test above); counting the sessions that have not spoken yet at the measured
    marginal cost stops the burst near what fits, and the refused are told to retry."""
    clock = Clock()
    a = admission(clock)
    admitted_at: list[float] = []
    refused: list[Refused] = []
    for _ in range(48):
        why = a.refusal(live=True, count=False)
        if why is None:
            a.take(live=True)
            admitted_at.append(clock.now)
        else:
            refused.append(why)
        clock.now += 0.25
        spoken = sum(1 for at in admitted_at if clock.now - at >= 2.5)
        a.observe(min(1.0, 0.06 * spoken) * 0.25, a.live.open, 0, spoken=spoken)
    # what the projection lets in (LIVE_MAX_SHARE of the engine), and two more: the steps between
    # an admission and the sample that shows it
    assert 12 <= len(admitted_at) <= round(LIVE_MAX_SHARE / 0.06) + 2, len(admitted_at)
    # refused for the sessions yet to speak, then (the engine's whole time taken) for that
    assert refused and all(r.retry_after == LIVE_RETRY_AFTER_S for r in refused)
    assert "not spoken yet" in refused[0].reason
    assert all("not spoken yet" in r.reason or "all of the engine's time" in r.reason for r in refused)
    assert len(admitted_at) + len(refused) == 48


def test_sessions_that_stay_silent_count_at_no_cost_after_the_speaking_wait() -> None:
    """Sessions that have not spoken count at a speaking stream's marginal cost until
    LIVE_SPEAK_WAIT_S after their admission; then at what they cost (nothing): a session that
    stays silent does not hold the gate shut."""
    clock = Clock()
    a = admission(clock)
    admit_all(a, LIVE_START)
    for spoken in range(1, LIVE_START + 1):  # they start speaking one after another, 9 % each
        clock.now += 0.5
        a.observe(0.09 * spoken * 0.5, LIVE_START, 0, spoken=spoken)
    assert a.backlog.live_cost == pytest.approx(0.09)
    clock.now += LIVE_PROVE_S  # proven, the share unchanged
    a.observe(0.72 * LIVE_PROVE_S, LIVE_START, 0, spoken=LIVE_START)
    fit = math.floor((LIVE_MAX_SHARE - 0.72) / 0.09 + 1e-9)  # 72 % + 9 % for each up to LIVE_MAX_SHARE
    assert len(admit_all(a, 10)) == fit
    refused = a.refusal(live=True, count=False)
    assert a.live.waiting() == fit and refused is not None and "not spoken yet" in refused.reason
    clock.now += LIVE_SPEAK_WAIT_S
    a.observe(0.72 * 0.5, LIVE_START + fit, 0, spoken=LIVE_START)
    assert a.live.waiting() == 0 and a.refusal(live=True, count=False) is None


def test_the_sessions_the_slow_start_trusts_are_never_refused_by_projection() -> None:
    """A steep line fitted over two streams on a loaded machine refuses none of the LIVE_START
    sessions the slow start admits on trust."""
    clock = Clock()
    a = admission(clock)
    admit_all(a, 2)
    for spoken, share in ((1, 0.3), (1, 0.3), (2, 0.9), (2, 0.9), (1, 0.3), (1, 0.3), (2, 0.9), (2, 0.9)):
        clock.now += 0.5
        a.observe(share * 0.5, 2, 0, spoken=spoken)
    assert a.backlog.live_cost is not None and a.backlog.live_cost > 0.3
    assert a.live.projected_share() is not None and a.live.projected_share() > 1.0
    assert len(admit_all(a)) == LIVE_START - 2


class _Waits:
    """A live session's wait on the test's clock: each poll moves it and lets the engine report
    (`report(now)`) what it did meanwhile."""

    def __init__(self, clock: Clock, report: Callable[[], None]) -> None:
        self.clock, self.report, self.polls = clock, report, 0

    async def __call__(self, seconds: float) -> None:
        self.polls += 1
        self.clock.now += seconds
        self.report()


def _with_unshown_sessions(clock: Clock, report: Callable[[], None]) -> tuple[Admission, _Waits, list[int]]:
    """LIVE_START sessions of which two speak (a steep line: 30 % then 70 %), six not yet: a new
    session is refused for their unshown cost. Returns the admission, its waits and its busy count."""
    waits = _Waits(clock, report)
    busy: list[int] = []
    a = Admission(max_inflight=1000, max_queue_delay_secs=30.0, clock=clock, sleep=waits,
                  on_busy=lambda: busy.append(1))
    admit_all(a, LIVE_START)
    for _ in range(2):
        for spoken, share in ((1, 0.3), (2, 0.7)):
            clock.now += 0.5
            a.observe(share * 0.5, LIVE_START, 0, spoken=spoken)
    return a, waits, busy


async def test_a_live_session_refused_for_unshown_cost_waits_for_it_to_show() -> None:
    """The sessions admitted lately start speaking while the new one waits on its upgrade, and
    the line settles: it is admitted, not refused and told to come back in ten seconds."""
    from app.admission import LIVE_ADMIT_WAIT_S

    clock = Clock()
    spoken = [2]

    def report() -> None:
        spoken[0] = min(LIVE_START, spoken[0] + 1)  # one more speaks every poll
        a.observe(0.7 * 0.25, LIVE_START, 0, spoken=spoken[0])

    a, _, busy = _with_unshown_sessions(clock, report)
    refused = a.refusal(live=True, count=False)
    assert refused is not None and refused.unshown and "not spoken yet" in refused.reason
    started = clock.now
    permit = await a.take_live()
    assert permit.live and a.live.open == LIVE_START + 1
    assert 0 < clock.now - started <= LIVE_ADMIT_WAIT_S and busy == []


async def test_a_live_session_still_unshown_after_the_wait_is_refused_once_with_retry_after() -> None:
    from app.admission import LIVE_ADMIT_WAIT_S

    clock = Clock()
    a, _, busy = _with_unshown_sessions(clock, lambda: None)  # nobody starts speaking
    started = clock.now
    with pytest.raises(Refused) as info:
        await a.take_live()
    assert info.value.retry_after == LIVE_RETRY_AFTER_S and "not spoken yet" in info.value.reason
    assert LIVE_ADMIT_WAIT_S - 0.25 <= clock.now - started <= LIVE_ADMIT_WAIT_S
    assert busy == [1]


async def test_a_live_session_refused_for_a_shed_pass_does_not_wait() -> None:
    clock = Clock()
    a, waits, _ = _with_unshown_sessions(clock, lambda: None)
    a.observe(0.5, LIVE_START, 3, spoken=2)  # the engine shed passes: behind, whatever shows later
    with pytest.raises(Refused) as info:
        await a.take_live()
    assert not info.value.unshown and "behind their cadence" in info.value.reason
    assert waits.polls == 0
