"""The offline backlog and its expected queue delay (app/backlog.py), on a clock the test moves."""

from __future__ import annotations

import math

import pytest

from app.backlog import (
    LIVE_COST_SAMPLES,
    LIVE_RETRY_AFTER_S,
    LIVE_SETTLE_S,
    LIVE_TAU_S,
    MAX_LIVE_SHARE,
    MIN_SAMPLE_S,
    RESERVATION_S,
    Backlog,
    live_engine_seconds,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def step(backlog: Backlog, *outputs: tuple[str, float, bool], live_s: float = 0.0) -> None:
    """One engine step's outputs reported together, as the bridge's dispatch does, with the
    engine time live streams took in it."""
    for rid, decoded, finished in outputs:
        backlog.progress(rid, decoded, finished)
    backlog.live(live_s)
    backlog.sample()


def test_an_empty_backlog_has_no_delay_and_admits() -> None:
    backlog = Backlog(Clock())
    assert backlog.delay() == 0.0 and backlog.retry_after(30.0) is None and backlog.drain_time() == 1


def test_before_any_measurement_the_oldest_request_age_bounds_the_delay() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.add("a", 10.0)
    clock.now += 40.0  # nothing reported yet: the engine has been on it for 40 s
    backlog.add("b", 10.0)
    assert backlog.rate is None and backlog.delay() == pytest.approx(40.0)
    assert backlog.retry_after(30.0) == 10


def test_the_rate_is_measured_from_progress_and_the_delay_is_work_over_rate() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    for k in range(4):
        backlog.add(f"r{k}", 30.0)
    clock.now += 6.0
    step(backlog, ("r0", 30.0, True))  # 30 audio-seconds in 6 s: 5x real time
    assert backlog.rate == pytest.approx(5.0)
    assert backlog.seconds == pytest.approx(90.0)
    assert backlog.delay() == pytest.approx(18.0)
    assert backlog.retry_after(10.0) == 8 and backlog.retry_after(20.0) is None


def test_a_batch_finishing_after_a_long_step_is_one_sample_not_a_collapse() -> None:
    """16 requests of 7.66 s finishing together after a 60 s step: 2.04 audio-s/s, not the first
    output over 60 s and the rest over nothing (the overload benchmark's 1123 s Retry-After)."""
    clock = Clock()
    backlog = Backlog(clock)
    for k in range(17):
        backlog.add(f"r{k}", 7.66)
    clock.now += 60.0
    step(backlog, *((f"r{k}", 7.66, True) for k in range(16)))
    assert backlog.rate == pytest.approx(16 * 7.66 / 60.0)
    assert backlog.delay() == pytest.approx(7.66 / (16 * 7.66 / 60.0))


def test_partial_progress_counts_once_and_aborted_work_leaves_without_progress() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.add("long", 120.0)
    clock.now += 3.0
    step(backlog, ("long", 30.0, False))  # one 30 s window decoded
    step(backlog, ("long", 30.0, False))  # the same window again: no new progress
    assert backlog.seconds == pytest.approx(90.0)
    backlog.forget("long")
    assert backlog.seconds == 0.0 and backlog.delay() == 0.0


def test_outputs_within_one_sample_interval_are_measured_together() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.add("a", 4.0)
    backlog.add("b", 4.0)
    backlog.add("c", 100.0)
    clock.now += MIN_SAMPLE_S / 2
    step(backlog, ("a", 4.0, True))
    assert backlog.rate is None  # too short a span to measure
    clock.now += MIN_SAMPLE_S / 2
    step(backlog, ("b", 4.0, True))
    assert backlog.rate == pytest.approx(8.0 / MIN_SAMPLE_S)


def test_lower_priority_work_does_not_delay_interactive_requests() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.add("job", 600.0, priority=10)
    backlog.add("req", 5.0, priority=0)
    clock.now += 1.0
    step(backlog, ("req", 5.0, True))
    assert backlog.delay(priority=0) == 0.0  # only the job is left, behind interactive work
    assert backlog.delay(priority=10) == pytest.approx(600.0 / 5.0)


# ---------------------------------------------------------------- live streams' share of the engine


def test_live_load_raises_the_delay_before_any_offline_output() -> None:
    """The rate was measured on an engine offline work had to itself; then live sessions open and
    take 80 % of every step. No offline output arrives for a while (a long batch), yet the
    estimate must grow at once, toward 5x, not wait for that output."""
    clock = Clock()
    backlog = Backlog(clock)
    for k in range(6):
        backlog.add(f"r{k}", 30.0)
    clock.now += 6.0
    step(backlog, ("r0", 30.0, True))
    assert backlog.rate == pytest.approx(5.0) and backlog.delay() == pytest.approx(30.0)
    for _ in range(8):  # 4 s of steps whose outputs are the live streams' partials only
        clock.now += MIN_SAMPLE_S
        step(backlog, live_s=0.8 * MIN_SAMPLE_S)
    share = 0.8 * (1 - math.exp(-4.0 / LIVE_TAU_S))
    assert backlog.live_share == pytest.approx(share)
    assert backlog.delay() == pytest.approx(150.0 / (5.0 * (1 - share)))
    assert backlog.delay() > 2 * 30.0 and backlog.retry_after(30.0) is not None


def test_the_rate_is_measured_net_of_the_time_live_streams_took() -> None:
    """30 audio-s in 6 s while live streams took 3 of them: offline runs at 10 audio-s per engine
    second it gets. Same delay while the live load lasts; half of it once the streams end."""
    clock = Clock()
    backlog = Backlog(clock)
    for k in range(4):
        backlog.add(f"r{k}", 30.0)
    for _ in range(12):
        clock.now += MIN_SAMPLE_S
        step(backlog, live_s=0.5 * MIN_SAMPLE_S)
    step(backlog, ("r0", 30.0, True))
    assert backlog.rate == pytest.approx(10.0)
    share = backlog.live_share
    assert share == pytest.approx(0.5 * (1 - math.exp(-6.0 / LIVE_TAU_S)))
    assert backlog.delay() == pytest.approx(90.0 / (10.0 * (1 - share)))
    for _ in range(10):  # the streams ended: the idle engine reports no live time once a second
        clock.now += 1.0
        step(backlog)
    assert backlog.current_live_share() < 0.01
    assert backlog.delay() == pytest.approx(9.0, rel=0.01)


def test_live_load_measured_before_offline_work_arrives_counts_for_it() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.rate = 5.0  # measured earlier, on an engine offline work had to itself
    for _ in range(20):
        clock.now += MIN_SAMPLE_S
        step(backlog, live_s=0.75 * MIN_SAMPLE_S)
    backlog.add("upload", 50.0)
    assert backlog.delay() == pytest.approx(50.0 / (5.0 * (1 - backlog.live_share)))
    assert backlog.delay() > 35.0  # over a 30 s limit: refused, where 10 s of work alone would pass


def test_streams_taking_the_whole_engine_leave_the_delay_finite_and_over_any_limit() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.rate = 5.0
    backlog.add("upload", 10.0)
    for _ in range(40):
        clock.now += MIN_SAMPLE_S
        step(backlog, live_s=2 * MIN_SAMPLE_S)  # host time of overlapping stages can exceed the span
    assert backlog.live_share <= 1.0
    assert backlog.delay() == pytest.approx(10.0 / (5.0 * (1 - MAX_LIVE_SHARE)))


def test_live_engine_seconds_sums_the_streaming_stages_only() -> None:
    stages = {"streaming.encode": [0.2, 0.1], "streaming.decode": [0.05], "offline.encode": [3.0]}
    assert live_engine_seconds(stages) == pytest.approx(0.35)
    assert live_engine_seconds({}) == 0.0


def test_new_offline_work_is_refused_while_live_streams_leave_the_engine_no_time() -> None:
    """Nothing queued, so no work ahead of it; but with live streams taking the whole engine a
    7.7 s upload would take minutes (the overload run's first uploads: 153 s)."""
    clock = Clock()
    backlog = Backlog(clock)
    backlog.rate = 5.0
    for _ in range(20):
        clock.now += MIN_SAMPLE_S
        step(backlog, live_s=MIN_SAMPLE_S)
    assert backlog.delay() == 0.0 and backlog.live_share >= MAX_LIVE_SHARE
    assert backlog.retry_after(30.0) == LIVE_RETRY_AFTER_S
    for _ in range(10):  # the streams ended
        clock.now += 1.0
        step(backlog)
    assert backlog.retry_after(30.0) is None


def feed_live(backlog: Backlog, clock: Clock, streams: int, share: float, samples: int) -> None:
    for _ in range(samples):
        clock.now += MIN_SAMPLE_S
        backlog.live(share * MIN_SAMPLE_S, streams)
        backlog.sample()


def test_a_live_stream_costs_what_one_more_adds_not_the_average() -> None:
    """One stream alone reads 64 % (its passes run back to back), sixteen batched 94 %: what one
    more stream adds is the slope, 2 %, not the average share of a stream (6 % at 16). Nothing is
    measured while the samples hold one stream count only."""
    clock = Clock()
    backlog = Backlog(clock)
    feed_live(backlog, clock, 1, 0.64, 10)
    assert backlog.live_cost is None and backlog.live_projection() == pytest.approx(backlog.live_share)
    feed_live(backlog, clock, 16, 0.94, 10)
    assert backlog.live_cost == pytest.approx(0.02, rel=1e-6)
    feed_live(backlog, clock, 16, 0.94, LIVE_COST_SAMPLES)  # the 1-stream samples aged out: the last slope stays
    assert backlog.live_cost == pytest.approx(0.02, rel=1e-6)


def test_sessions_admitted_lately_count_at_the_marginal_cost_until_they_show() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    feed_live(backlog, clock, 4, 0.30, 10)
    feed_live(backlog, clock, 8, 0.40, 30)
    share, cost = backlog.live_share, backlog.live_cost
    assert cost is not None and 0.0 < cost < share / 8  # below the average cost of a stream
    backlog.live(0.0, 8, unproven=2)
    assert backlog.live_projection() == pytest.approx(share + 2 * cost)
    assert backlog.live_projection(streams_open=False) == pytest.approx(2 * cost)  # a burst from none
    backlog.live(0.0, 10, unproven=0)  # they show in the share now
    assert backlog.live_projection() == pytest.approx(share)


def test_live_is_behind_for_a_while_after_the_engine_sheds_passes() -> None:
    """A shed pass says the streams open already take more than the engine has, whatever share was
    measured: new sessions and new offline work are refused until LIVE_SETTLE_S passes without
    one, or every stream ends."""
    clock = Clock()
    backlog = Backlog(clock)
    backlog.live(0.1, 8)
    assert not backlog.live_behind()
    backlog.live(0.1, 8, passes_shed=3)
    assert backlog.retry_after(30.0) == LIVE_RETRY_AFTER_S  # new offline work too, the queue empty
    assert backlog.retry_after(30.0, live_open=False) is None
    clock.now += LIVE_SETTLE_S - 0.1
    assert backlog.live_behind()
    clock.now += 0.2
    assert not backlog.live_behind()
    backlog.live(0.1, 8, passes_shed=1)
    backlog.live_ended()  # every session ended
    assert not backlog.live_behind()


def test_work_that_finishes_later_than_expected_stretches_the_estimate_until_it_is_on_time() -> None:
    """The estimate corrects itself by its measured error (the 90th percentile of actual over
    expected): requests expected in 10 s that took 20 raise the delay towards twice the modelled
    one; requests on time bring it back to 1; a request expected within CORRECTION_MIN_EXPECTED_S
    (its own latency, not a queue) corrects nothing."""
    clock = Clock()
    backlog = Backlog(clock)
    backlog.rate = 3.0  # audio-s per s, measured earlier, no live load
    for k in range(20):
        backlog.add(f"slow{k}", 30.0)  # expected in 10 s when alone
        clock.now += 20.0
        backlog.progress(f"slow{k}", 30.0, True)
    assert backlog.correction == pytest.approx(2.0, abs=0.2)
    backlog.add("queued", 30.0)
    assert backlog.delay() == pytest.approx(10.0 * backlog.correction)
    assert backlog.retry_after(15.0) is not None  # 20 s > 15: refused on the corrected estimate
    backlog.forget("queued")
    for k in range(20):
        backlog.add(f"short{k}", 3.0)  # expected in 1 s: its latency is its own
        clock.now += 4.0
        backlog.progress(f"short{k}", 3.0, True)
    assert backlog.correction == pytest.approx(2.0, abs=0.2)
    for k in range(60):
        backlog.add(f"on_time{k}", 30.0)
        clock.now += 10.0
        backlog.progress(f"on_time{k}", 30.0, True)
    assert backlog.correction == pytest.approx(1.0, abs=0.01)


def test_work_admitted_before_its_audio_is_decoded_counts_as_a_typical_request() -> None:
    """A burst of uploads admitted together each sees the others: reserved at admission, counted
    as the typical request until tracked (or dropped after RESERVATION_S if it never is)."""
    clock = Clock()
    backlog = Backlog(clock)
    backlog.rate = 2.0
    backlog.add("first", 8.0)
    backlog.progress("first", 8.0, True)
    assert backlog.delay() == 0.0 and backlog.typical_seconds == 8.0
    for _ in range(3):
        backlog.reserve()
    assert backlog.delay() == pytest.approx(3 * 8.0 / 2.0)
    backlog.add("job", 3600.0, priority=10)  # a batch job takes no permit: it replaces none
    backlog.forget("job")
    assert backlog.typical_seconds == 8.0 and backlog.delay() == pytest.approx(3 * 8.0 / 2.0)
    backlog.add("second", 4.0)  # one of them arrived: it replaces its reservation
    assert backlog.delay() == pytest.approx((2 * backlog.typical_seconds + 4.0) / 2.0)
    clock.now += RESERVATION_S + 0.1  # the other two never came
    assert backlog.delay() == pytest.approx(4.0 / 2.0)
