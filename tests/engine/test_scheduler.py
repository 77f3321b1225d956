"""engine.scheduler: each rule on hand-made queues (random queues: test_scheduler_properties.py)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.errors import InvalidRequestError
from engine.scheduler import POLICIES, Scheduler, WaitingRequest, length_bucket, pick_streams

NOW = 100.0


def offline(rid: str, length: float, age: float = 0.0, priority: int = 0) -> WaitingRequest:
    """An offline request that arrived `age` seconds before NOW."""
    return WaitingRequest(rid, length, NOW - age, priority)


def stream(rid: str, age: float = 0.0, priority: int = 0, buffered: float = 0.0) -> WaitingRequest:
    """A live stream that opened `age` seconds before NOW and has `buffered` seconds of audio waiting."""
    return WaitingRequest(rid, buffered, NOW - age, priority, streaming=True)


def test_empty_input_and_no_free_slots_admit_nothing() -> None:
    sched = Scheduler()
    assert sched.schedule([], free_slots=8, now=NOW).admitted == ()
    out = sched.schedule([offline("a", 5.0)], free_slots=0, now=NOW)
    assert out.admitted == () and out.padded_length == 0 and out.useful_length == 0
    assert sched.schedule([offline("a", 5.0)], free_slots=-3, now=NOW).admitted == ()


def test_fcfs_takes_arrival_order_regardless_of_length() -> None:
    sched = Scheduler(policy="fcfs", max_batch_size=3)
    waiting = [offline("new", 1.0, age=0.1), offline("old", 30.0, age=0.5), offline("mid", 2.0, age=0.3)]
    out = sched.schedule(waiting, free_slots=8, now=NOW)
    assert out.admitted == ("old", "mid", "new")
    assert out.policy == "fcfs"
    assert out.useful_length == 33.0 and out.padded_length == 90.0
    assert out.pad_ratio == pytest.approx(90 / 33)


def test_priority_beats_arrival_and_id_breaks_ties() -> None:
    sched = Scheduler(policy="fcfs", max_batch_size=2)
    waiting = [offline("b", 1.0, age=1.0), offline("a", 1.0, age=1.0), offline("vip", 1.0, age=0.0, priority=-1)]
    assert sched.schedule(waiting, free_slots=2, now=NOW).admitted == ("vip", "a")


def test_window_groups_similar_lengths_and_includes_the_oldest() -> None:
    sched = Scheduler(policy="window", max_batch_size=3, max_pad_ratio=100.0)
    waiting = [
        offline("oldest", 10.0, age=1.0),
        offline("long", 28.0, age=0.9),
        offline("short1", 1.0, age=0.8),
        offline("ten-ish", 11.0, age=0.7),
        offline("nine", 9.0, age=0.6),
        offline("short2", 1.5, age=0.5),
    ]
    out = sched.schedule(waiting, free_slots=3, now=NOW)
    assert out.policy == "window"
    assert out.admitted == ("oldest", "ten-ish", "nine")  # urgency order within the run
    assert out.useful_length == 30.0 and out.padded_length == 33.0
    # FCFS would have padded far more.
    fcfs = Scheduler(policy="fcfs", max_batch_size=3).schedule(waiting, free_slots=3, now=NOW)
    assert fcfs.padded_length - fcfs.useful_length > out.padded_length - out.useful_length


def test_window_only_looks_at_the_most_urgent_candidates() -> None:
    # window = ceil(2 × 1.5) = 3 candidates: the perfect match "twin" (4th most urgent) is out of reach.
    sched = Scheduler(policy="window", max_batch_size=2, length_window_factor=1.5, max_pad_ratio=100.0)
    waiting = [
        offline("oldest", 10.0, age=1.0),
        offline("b", 20.0, age=0.9),
        offline("c", 2.0, age=0.8),
        offline("twin", 10.0, age=0.7),
    ]
    assert sched.window_size == 3
    # Within reach, {oldest, c} pads 8 s and {oldest, b} 10 s.
    assert sched.schedule(waiting, free_slots=2, now=NOW).admitted == ("oldest", "c")
    wider = Scheduler(policy="window", max_batch_size=2, length_window_factor=2.0, max_pad_ratio=100.0)
    assert wider.schedule(waiting, free_slots=2, now=NOW).admitted == ("oldest", "twin")


def test_window_ties_go_to_the_more_urgent_run() -> None:
    sched = Scheduler(policy="window", max_batch_size=2, max_pad_ratio=100.0)
    # Runs {oldest, x} and {oldest, y} pad the same (1 s); x arrived first.
    waiting = [offline("oldest", 5.0, age=1.0), offline("y", 6.0, age=0.2), offline("x", 4.0, age=0.5)]
    assert sched.schedule(waiting, free_slots=2, now=NOW).admitted == ("oldest", "x")


def test_pad_ratio_cap_shrinks_the_batch_but_always_admits_the_oldest() -> None:
    waiting = [offline("oldest", 30.0, age=1.0), offline("tiny1", 1.0, age=0.5), offline("tiny2", 1.0, age=0.4)]
    capped = Scheduler(policy="window", max_batch_size=3, max_pad_ratio=1.5).schedule(waiting, 3, NOW)
    assert capped.admitted == ("oldest",)
    assert capped.pad_ratio == 1.0
    loose = Scheduler(policy="window", max_batch_size=3, max_pad_ratio=4.0).schedule(waiting, 3, NOW)
    assert loose.admitted == ("oldest", "tiny1", "tiny2")  # 90 / 32 <= 4
    assert loose.pad_ratio <= 4.0


def test_pad_ratio_cap_picks_the_largest_run_that_fits() -> None:
    waiting = [
        offline("oldest", 4.0, age=1.0),
        offline("a", 3.0, age=0.9),
        offline("b", 5.0, age=0.8),
        offline("c", 20.0, age=0.7),
        offline("d", 0.5, age=0.6),
    ]
    # In length order d .5, a 3, oldest 4, b 5, c 20. Runs of 4 with oldest: {d,a,oldest,b} 20/12.5 = 1.6
    # and {a,oldest,b,c} 80/32 = 2.5. Runs of 3: {d,a,oldest} 12/7.5 = 1.6, {a,oldest,b} 15/12 = 1.25.
    out = Scheduler(policy="window", max_batch_size=4, max_pad_ratio=2.0).schedule(waiting, 4, NOW)
    assert out.admitted == ("oldest", "a", "b", "d")
    assert out.padded_length == 20.0 and out.useful_length == 12.5
    tighter = Scheduler(policy="window", max_batch_size=4, max_pad_ratio=1.5).schedule(waiting, 4, NOW)
    assert tighter.admitted == ("oldest", "a", "b")
    assert tighter.pad_ratio == 1.25


def test_starved_request_is_admitted_first_despite_its_length() -> None:
    sched = Scheduler(policy="window", max_batch_size=2, max_wait_time=2.0, max_pad_ratio=1.5)
    waiting = [
        offline("fresh1", 2.0, age=0.3, priority=-5),
        offline("fresh2", 2.0, age=0.2, priority=-5),
        offline("old-long", 300.0, age=2.5),
    ]
    out = sched.schedule(waiting, free_slots=2, now=NOW)
    assert out.admitted == ("old-long", "fresh1")
    assert out.policy == "starved"
    # Not yet past the bound: the higher-priority pair goes first.
    early = sched.schedule(waiting, free_slots=2, now=NOW - 1.0)
    assert early.admitted == ("fresh1", "fresh2")


def test_starved_requests_beyond_capacity_go_most_urgent_first() -> None:
    sched = Scheduler(policy="window", max_batch_size=3, max_wait_time=1.0)
    waiting = [offline(f"r{i}", float(i + 1), age=5.0 - i * 0.1) for i in range(4)] + [stream("s", age=3.0)]
    out = sched.schedule(waiting, free_slots=8, now=NOW)
    assert out.admitted == ("s", "r0", "r1") and out.policy == "starved"


# ---------------------------------------------------------------- live streams before offline work (issue 35)


def test_live_streams_go_ahead_of_offline_work_that_waited_past_the_bound() -> None:
    """A backlog that admission lets grow to max_queue_delay_secs is all overdue: it must not take
    the slots of live sessions opening meanwhile (batch jobs, priority 10, least of all)."""
    sched = Scheduler(policy="window", max_batch_size=4, max_wait_time=2.0)
    waiting = [offline("upload", 7.0, age=25.0), offline("job", 7.0, age=40.0, priority=10),
               stream("live", age=0.1, buffered=0.1), offline("upload2", 7.0, age=20.0)]
    out = sched.schedule(waiting, free_slots=2, now=NOW)
    assert out.admitted == ("live", "upload") and out.policy == "starved"
    assert sched.schedule(waiting, free_slots=1, now=NOW).admitted == ("live",)
    assert sched.schedule(waiting, free_slots=4, now=NOW).admitted == ("live", "upload", "upload2", "job")


def test_streams_keep_their_place_whatever_the_offline_priorities() -> None:
    sched = Scheduler(policy="fcfs", max_batch_size=2, max_wait_time=2.0)
    waiting = [offline("vip-file", 1.0, age=5.0, priority=-5), stream("s", age=0.0, priority=3)]
    assert sched.schedule(waiting, free_slots=1, now=NOW).admitted == ("s",)


def test_offline_work_is_admitted_in_the_slots_waiting_streams_leave() -> None:
    """Offline work does not starve without live overload: each call gives it the slots left over,
    its overdue requests first (the length guards skipped), then the policy's pick."""
    sched = Scheduler(policy="sjf", max_batch_size=4, max_wait_time=2.0, max_pad_ratio=1.5)
    waiting = [stream("s1", age=0.3, buffered=0.3), offline("short", 1.0, age=0.5),
               offline("long-overdue", 60.0, age=3.0), stream("s2", age=0.2, buffered=0.2),
               offline("short2", 1.2, age=0.1)]
    out = sched.schedule(waiting, free_slots=4, now=NOW)
    assert out.admitted == ("s2", "s1", "long-overdue", "short")
    assert out.useful_length == 61.0 and out.padded_length == 120.0  # the flushed one ignores the pad cap


def test_streaming_requests_come_before_offline_ones() -> None:
    sched = Scheduler(policy="window", max_batch_size=4)
    waiting = [offline("file", 3.0, age=1.0), stream("s2", age=0.1), stream("s1", age=0.2)]
    out = sched.schedule(waiting, free_slots=4, now=NOW)
    assert out.admitted == ("s1", "s2", "file")
    assert out.useful_length == 3.0 and out.padded_length == 3.0  # streams have no length
    only_two = sched.schedule(waiting, free_slots=2, now=NOW)
    assert only_two.admitted == ("s1", "s2") and only_two.policy == "fcfs"


def test_a_request_is_starved_once_it_has_waited_exactly_max_wait_time() -> None:
    sched = Scheduler(policy="sjf", max_batch_size=1, max_wait_time=2.0)
    waiting = [offline("short", 1.0, age=0.1), offline("long", 20.0, age=2.0)]
    assert sched.schedule(waiting, 1, NOW).admitted == ("long",)
    assert sched.schedule(waiting, 1, NOW - 0.01).admitted == ("short",)


# ---------------------------------------------------------------- streaming cohort admission


def test_cohort_admits_streams_with_the_least_buffered_audio_first() -> None:
    waiting = [stream("old", age=1.5, buffered=1.5), stream("mid", age=0.8, buffered=0.8),
               stream("new", age=0.1, buffered=0.1), stream("vip", age=1.0, priority=-1, buffered=1.0)]
    cohort = Scheduler(max_batch_size=3, max_wait_time=2.0).schedule(waiting, 3, NOW)
    assert cohort.admitted == ("vip", "new", "mid")  # priority first, then shortest backlog: LIFO under load
    arrival = Scheduler(max_batch_size=3, max_wait_time=2.0, streaming_cohort_admit=False).schedule(waiting, 3, NOW)
    assert arrival.admitted == ("vip", "old", "mid")


def test_cohort_starvation_rule_puts_streams_that_waited_max_wait_time_first_oldest_first() -> None:
    sched = Scheduler(max_batch_size=3, max_wait_time=1.0)
    waiting = [stream("s1", age=3.0, buffered=3.0), stream("s2", age=1.2, buffered=1.2),
               stream("s3", age=0.5, buffered=0.5), stream("s4", age=0.2, buffered=0.2)]
    out = sched.schedule(waiting, 3, NOW)
    assert out.admitted == ("s1", "s2", "s4") and out.policy == "starved"


def test_streams_with_equal_backlogs_keep_arrival_order() -> None:
    waiting = [stream("b", age=0.2), stream("a", age=0.3), stream("c", age=0.1)]
    assert Scheduler(max_batch_size=2).schedule(waiting, 2, NOW).admitted == ("a", "b")


# ---------------------------------------------------------------- bucket


def test_length_buckets_are_octaves_of_seconds() -> None:
    assert [length_bucket(x) for x in (0.0, 0.5, 0.999, 1.0, 1.9, 2.0, 3.9, 4.0, 29.0, 32.0)] == \
        [0, 0, 0, 1, 1, 2, 2, 3, 5, 6]


def test_bucket_admits_the_fullest_bucket_even_past_the_oldest_request() -> None:
    sched = Scheduler(policy="bucket", max_batch_size=3, max_wait_time=2.0)
    waiting = [offline("oldest", 20.0, age=1.0), offline("a", 2.5, age=0.9), offline("b", 3.0, age=0.8),
               offline("long2", 17.0, age=0.7), offline("c", 3.9, age=0.6), offline("d", 2.0, age=0.5)]
    out = sched.schedule(waiting, 3, NOW)
    assert out.policy == "bucket"
    assert out.admitted == ("a", "b", "c")  # [2, 4) s holds 4, [16, 32) s holds 2; most urgent first
    assert out.pad_ratio == pytest.approx(3 * 3.9 / 9.4)
    # With two slots both buckets fill the batch; the tie goes to the bucket holding the oldest request.
    assert sched.schedule(waiting, 2, NOW).admitted == ("oldest", "long2")
    # Once the oldest has waited max_wait_time it goes first whatever the buckets hold.
    assert sched.schedule(waiting, 3, NOW + 1.0).admitted[0] == "oldest"


def test_bucket_keeps_the_shape_bounds_inside_the_sub_second_bucket() -> None:
    waiting = [offline("a", 0.9, age=1.0), offline("tiny", 0.05, age=0.9), offline("b", 0.8, age=0.8)]
    out = Scheduler(policy="bucket", max_batch_size=3, max_pad_ratio=1.5).schedule(waiting, 3, NOW)
    assert out.admitted == ("a", "b")  # {a, tiny} pads 1.8 / 0.95 > 1.5, so tiny is skipped; b still fits
    floored = Scheduler(policy="bucket", max_batch_size=3, length_bucket_ratio=0.9).schedule(waiting, 3, NOW)
    assert floored.admitted == ("a",)  # 0.8 / 0.9 < 0.9


# ---------------------------------------------------------------- sjf


def test_sjf_admits_the_shortest_and_starvation_bounds_the_long_ones() -> None:
    sched = Scheduler(policy="sjf", max_batch_size=2, max_wait_time=2.0)
    waiting = [offline("long", 30.0, age=1.9), offline("mid", 5.0, age=1.0), offline("short", 1.0, age=0.1),
               offline("short-vip", 2.0, age=0.0, priority=-1)]
    out = sched.schedule(waiting, 2, NOW)
    assert out.policy == "sjf"
    assert out.admitted == ("short-vip", "short")
    assert sched.schedule(waiting, 2, NOW + 0.1).admitted == ("long", "short-vip")


def test_sjf_stops_at_the_first_length_that_breaks_the_pad_cap() -> None:
    waiting = [offline(f"r{length}", float(length), age=0.5) for length in (1, 2, 3, 10, 11)]
    out = Scheduler(policy="sjf", max_batch_size=5, max_pad_ratio=2.0).schedule(waiting, 5, NOW)
    assert out.admitted == ("r1", "r2", "r3")  # adding r10: 40 / 16 = 2.5 > 2
    assert out.pad_ratio == pytest.approx(1.5)


def test_window_respects_the_length_ratio_floor() -> None:
    waiting = [offline("oldest", 10.0, age=1.0), offline("a", 9.0, age=0.9), offline("b", 6.0, age=0.8)]
    loose = Scheduler(policy="window", max_batch_size=3).schedule(waiting, 3, NOW)
    assert loose.admitted == ("oldest", "a", "b")
    floored = Scheduler(policy="window", max_batch_size=3, length_bucket_ratio=0.8).schedule(waiting, 3, NOW)
    assert floored.admitted == ("oldest", "a")  # 6 / 10 < 0.8


# ---------------------------------------------------------------- preferred_batch_size


def test_preferred_sizes_snap_admission_down_to_the_largest_that_fills() -> None:
    sched = Scheduler(policy="fcfs", max_batch_size=8, max_wait_time=2.0, preferred_batch_size=(2, 4, 8))
    waiting = [offline(f"r{i}", 1.0, age=1.0 - i * 0.1) for i in range(6)]
    out = sched.schedule(waiting, 8, NOW)
    assert out.admitted == ("r0", "r1", "r2", "r3")
    assert out.held == 2 and out.next_admit_time == pytest.approx(NOW - 1.0 + 2.0)
    assert sched.schedule(waiting, 3, NOW).admitted == ("r0", "r1")  # free slots cap the natural count
    full = sched.schedule(waiting[:4], 8, NOW)
    assert full.admitted == ("r0", "r1", "r2", "r3") and full.held == 0 and full.next_admit_time is None


def test_preferred_sizes_hold_a_short_queue_until_the_oldest_starves() -> None:
    sched = Scheduler(policy="window", max_batch_size=8, max_wait_time=2.0, preferred_batch_size=(4,))
    waiting = [offline("a", 3.0, age=0.5), offline("b", 3.0, age=0.2), stream("s", age=0.1)]
    held = sched.schedule(waiting, 8, NOW)
    assert held.admitted == () and held.policy == "held" and held.held == 3
    assert held.next_admit_time is not None and held.next_admit_time == pytest.approx(NOW + 1.5)
    released = sched.schedule(waiting, 8, held.next_admit_time)  # the escape valve
    assert released.admitted == ("s", "a", "b") and released.policy == "starved" and released.held == 0


def test_preferred_sizes_count_streams_and_keep_the_shape_bounds() -> None:
    # Unsnapped: the stream and the run {b, a, oldest} (4 slots). Snapped to 3: the stream takes one slot
    # and the window policy, run again with the 2 left, picks {oldest, a}, not the first two of its 3-run.
    sched = Scheduler(policy="window", max_batch_size=4, max_pad_ratio=3.0, preferred_batch_size=(3, 2))
    waiting = [stream("s", age=0.1, buffered=0.1), offline("oldest", 10.0, age=1.0),
               offline("a", 9.0, age=0.9), offline("b", 4.0, age=0.8)]
    out = sched.schedule(waiting, 4, NOW)
    assert out.admitted == ("s", "oldest", "a") and out.held == 1


def test_a_preferred_size_the_shape_bounds_cannot_fill_falls_to_the_next_smaller() -> None:
    # All six fit (60 / 51 <= 1.5), three fit (30 / 21), but no pair with the oldest does (20 / 11 > 1.5).
    waiting = [offline("oldest", 1.0, age=1.0)] + [offline(f"r{i}", 10.0, age=0.5 - i * 0.01) for i in range(5)]
    pairs = Scheduler(policy="window", max_batch_size=8, max_pad_ratio=1.5, preferred_batch_size=(2, 1))
    out = pairs.schedule(waiting, 8, NOW)
    assert out.admitted == ("oldest",) and out.held == 5
    triples = Scheduler(policy="window", max_batch_size=8, max_pad_ratio=1.5, preferred_batch_size=(3, 2))
    assert triples.schedule(waiting, 8, NOW).admitted == ("oldest", "r0", "r1")


def test_preferred_sizes_are_off_while_anything_is_starved() -> None:
    sched = Scheduler(policy="fcfs", max_batch_size=8, max_wait_time=1.0, preferred_batch_size=(4,))
    waiting = [offline("old", 1.0, age=1.0), offline("new", 1.0, age=0.0), offline("newer", 1.0, age=0.0)]
    out = sched.schedule(waiting, 8, NOW)
    assert out.admitted == ("old", "new", "newer") and out.held == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_admits_at_most_free_slots_and_max_batch_size(policy: str) -> None:
    waiting = [offline(f"r{i:02d}", 1.0 + i % 5, age=1.0 - i * 0.01) for i in range(40)]
    sched = Scheduler(policy=policy, max_batch_size=8)
    assert len(sched.schedule(waiting, free_slots=3, now=NOW).admitted) == 3
    assert len(sched.schedule(waiting, free_slots=100, now=NOW).admitted) == 8


def test_output_is_deterministic_and_independent_of_input_order() -> None:
    rng = random.Random(7)
    waiting = [offline(f"r{i}", rng.choice([1.0, 2.0, 5.0, 30.0]), age=rng.choice([0.1, 0.5])) for i in range(30)]
    sched = Scheduler(max_batch_size=6)
    first = sched.schedule(waiting, free_slots=6, now=NOW)
    for _ in range(5):
        shuffled = waiting[:]
        rng.shuffle(shuffled)
        assert sched.schedule(shuffled, free_slots=6, now=NOW) == first


def test_bad_input_is_rejected_clearly() -> None:
    with pytest.raises(ValueError, match="policy"):
        Scheduler(policy="lifo")
    with pytest.raises(ValueError, match="length_bucket_ratio"):
        Scheduler(length_bucket_ratio=1.5)
    with pytest.raises(ValueError, match="preferred_batch_size"):
        Scheduler(max_batch_size=8, preferred_batch_size=(4, 16))
    with pytest.raises(ValueError, match="preferred_batch_size"):
        Scheduler(preferred_batch_size=(0,))
    with pytest.raises(ValueError, match="max_batch_size"):
        Scheduler(max_batch_size=0)
    with pytest.raises(ValueError, match="max_pad_ratio"):
        Scheduler(max_pad_ratio=0.5)
    with pytest.raises(ValueError, match="distinct"):
        Scheduler().schedule([offline("a", 1.0), offline("a", 2.0)], free_slots=2, now=NOW)
    with pytest.raises(ValueError, match="length"):
        Scheduler().schedule([offline("a", float("nan"))], free_slots=2, now=NOW)


def test_from_config_maps_engine_config_fields() -> None:
    config = EngineConfig(
        schedule_policy="sjf", max_batch_size=5, max_wait_time=0.5, length_window_factor=3.0, max_offline_pad_ratio=1.5,
        length_bucket_ratio=0.25, preferred_batch_size=(2, 4, 2), streaming_cohort_admit=False,
    )
    config.validate()
    sched = Scheduler.from_config(config)
    assert (sched.policy, sched.max_batch_size, sched.max_wait_time) == ("sjf", 5, 0.5)
    assert (sched.length_window_factor, sched.max_pad_ratio, sched.window_size) == (3.0, 1.5, 15)
    assert (sched.length_bucket_ratio, sched.preferred_batch_size, sched.streaming_cohort_admit) == (0.25, (4, 2), False)


@pytest.mark.parametrize(
    ("field", "value"),
    [("schedule_policy", "lifo"), ("length_bucket_ratio", -0.1), ("preferred_batch_size", (4, 17))],
)
def test_engine_config_rejects_bad_scheduling_fields(field: str, value: object) -> None:
    with pytest.raises(InvalidRequestError, match=field):
        EngineConfig(**{field: value}).validate()  # type: ignore[arg-type]


def test_scheduler_does_not_import_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import engine.scheduler\n"
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# ---- pick_streams: which ready streams one step advances ----


def test_pick_streams_takes_the_least_recently_advanced_first() -> None:
    assert pick_streams([5, 2, -1, 4], max_batch_size=2) == [2, 1]
    assert pick_streams([5, 2, -1, 4], max_batch_size=16) == [2, 1, 3, 0]


def test_pick_streams_breaks_ties_in_the_order_given() -> None:
    # never-advanced streams (-1) and streams advanced together go in admission order
    assert pick_streams([-1, -1, -1], max_batch_size=2) == [0, 1]
    assert pick_streams([3, 1, 3, 1], max_batch_size=3) == [1, 3, 0]


def test_pick_streams_with_nothing_ready() -> None:
    assert pick_streams([], max_batch_size=4) == []


def test_pick_streams_rejects_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        pick_streams([0], max_batch_size=0)


@pytest.mark.parametrize(("streams", "max_batch_size"), [(7, 3), (10, 4), (5, 5), (9, 1)])
def test_pick_streams_advances_every_ready_stream_within_its_share_of_steps(streams: int, max_batch_size: int) -> None:
    """Streams always ready, stepped as a runner steps them: each advances once in every
    ceil(streams / max_batch_size) steps, and no step leaves a slot empty while one waits."""
    last = [-1] * streams
    rounds = -(-streams // max_batch_size)
    for step in range(4 * rounds):
        picked = pick_streams(last, max_batch_size)
        assert len(picked) == min(streams, max_batch_size) and len(set(picked)) == len(picked)
        for i in picked:
            last[i] = step
        if step >= rounds - 1:  # every stream advanced within the last `rounds` steps
            assert min(last) > step - rounds
