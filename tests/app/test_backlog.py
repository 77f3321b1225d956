"""The offline backlog and its expected queue delay (app/backlog.py), on a clock the test moves."""

from __future__ import annotations

import pytest

from app.backlog import MIN_SAMPLE_S, Backlog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_empty_backlog_has_no_delay_and_admits() -> None:
    backlog = Backlog(Clock())
    assert backlog.delay() == 0.0 and backlog.retry_after(30.0) is None


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
    backlog.progress("r0", 30.0, finished=True)  # 30 audio-seconds in 6 s: 5x real time
    assert backlog.rate == pytest.approx(5.0)
    assert backlog.seconds == pytest.approx(90.0)
    assert backlog.delay() == pytest.approx(18.0)
    assert backlog.retry_after(10.0) == 8 and backlog.retry_after(20.0) is None


def test_partial_progress_counts_once_and_aborted_work_leaves_without_progress() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.add("long", 120.0)
    clock.now += 3.0
    backlog.progress("long", 30.0, finished=False)  # one 30 s window decoded
    backlog.progress("long", 30.0, finished=False)  # the same window again: no new progress
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
    backlog.progress("a", 4.0, finished=True)
    assert backlog.rate is None  # too short a span to measure: one step's outputs arrive together
    clock.now += MIN_SAMPLE_S / 2
    backlog.progress("b", 4.0, finished=True)
    assert backlog.rate == pytest.approx(8.0 / MIN_SAMPLE_S)


def test_lower_priority_work_does_not_delay_interactive_requests() -> None:
    clock = Clock()
    backlog = Backlog(clock)
    backlog.add("job", 600.0, priority=10)
    backlog.add("req", 5.0, priority=0)
    clock.now += 1.0
    backlog.progress("req", 5.0, finished=True)
    assert backlog.delay(priority=0) == 0.0  # only the job is left, behind interactive work
    assert backlog.delay(priority=10) == pytest.approx(600.0 / 5.0)
