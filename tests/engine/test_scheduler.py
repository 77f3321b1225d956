"""engine.scheduler: admission order, length grouping, caps and the starvation bound."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.scheduler import Scheduler, SchedulerOutput, WaitingRequest

NOW = 100.0


def offline(rid: str, length: float, age: float = 0.0, priority: int = 0) -> WaitingRequest:
    """An offline request that arrived `age` seconds before NOW."""
    return WaitingRequest(rid, length, NOW - age, priority)


def stream(rid: str, age: float = 0.0, priority: int = 0) -> WaitingRequest:
    return WaitingRequest(rid, 0.0, NOW - age, priority, streaming=True)


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
    sched = Scheduler(policy="window", max_batch_size=2, max_wait_time=1.0)
    waiting = [offline(f"r{i}", float(i + 1), age=5.0 - i * 0.1) for i in range(4)] + [stream("s", age=3.0)]
    out = sched.schedule(waiting, free_slots=8, now=NOW)
    assert out.admitted == ("r0", "r1")


def test_streaming_requests_come_before_offline_ones() -> None:
    sched = Scheduler(policy="window", max_batch_size=4)
    waiting = [offline("file", 3.0, age=1.0), stream("s2", age=0.1), stream("s1", age=0.2)]
    out = sched.schedule(waiting, free_slots=4, now=NOW)
    assert out.admitted == ("s1", "s2", "file")
    assert out.useful_length == 3.0 and out.padded_length == 3.0  # streams have no length
    only_two = sched.schedule(waiting, free_slots=2, now=NOW)
    assert only_two.admitted == ("s1", "s2") and only_two.policy == "fcfs"


@pytest.mark.parametrize("policy", ["fcfs", "window"])
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
        Scheduler(policy="sjf")
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
        schedule_policy="fcfs", max_batch_size=5, max_wait_time=0.5, length_window_factor=3.0, max_offline_pad_ratio=1.5
    )
    sched = Scheduler.from_config(config)
    assert (sched.policy, sched.max_batch_size, sched.max_wait_time) == ("fcfs", 5, 0.5)
    assert (sched.length_window_factor, sched.max_pad_ratio, sched.window_size) == (3.0, 1.5, 15)


def _check_invariants(sched: Scheduler, waiting: list[WaitingRequest], free_slots: int, out: SchedulerOutput) -> None:
    by_id = {w.request_id: w for w in waiting}
    capacity = min(max(free_slots, 0), sched.max_batch_size)
    assert len(out.admitted) == len(set(out.admitted)), "duplicate admission"
    assert set(out.admitted) <= set(by_id), "admitted an unknown id"
    assert len(out.admitted) <= capacity
    urgency = sorted(waiting, key=WaitingRequest.urgency)
    starved = [w.request_id for w in urgency if NOW - w.arrival_time > sched.max_wait_time]
    # Starved first, most urgent first, as many as fit.
    assert list(out.admitted[: min(len(starved), capacity)]) == starved[:capacity]
    # Work-conserving: never idle while requests wait, and the most urgent offline one always gets in.
    if waiting and capacity:
        assert out.admitted
        rest = [w for w in urgency if w.request_id not in starved]
        streams = [w.request_id for w in rest if w.streaming]
        offline_rest = [w for w in rest if not w.streaming]
        room = capacity - len(starved)
        assert [r for r in out.admitted if by_id[r].streaming and r not in starved] == streams[: max(room, 0)]
        if offline_rest and room > len(streams):
            assert offline_rest[0].request_id in out.admitted
    lengths = [by_id[r].length for r in out.admitted if not by_id[r].streaming]
    assert out.useful_length == pytest.approx(sum(lengths))
    assert out.padded_length == pytest.approx(max(lengths, default=0.0) * len(lengths))
    if sched.policy == "window" and out.policy == "window":
        chosen = [by_id[r] for r in out.admitted if not by_id[r].streaming]
        if len(chosen) > 1:
            assert out.pad_ratio <= sched.max_pad_ratio + 1e-9


def test_randomized_invariants() -> None:
    rng = random.Random(20261129)
    for _ in range(300):
        sched = Scheduler(
            policy=rng.choice(["fcfs", "window"]),
            max_batch_size=rng.randint(1, 12),
            max_wait_time=rng.choice([0.0, 0.5, 2.0]),
            length_window_factor=rng.choice([1.0, 1.5, 2.0, 4.0]),
            max_pad_ratio=rng.choice([1.0, 1.2, 2.0, 4.0, 50.0]),
        )
        waiting = [
            WaitingRequest(
                request_id=f"r{i}",
                length=0.0 if (streaming := rng.random() < 0.2) else rng.choice([0.0, 0.5, 3.0, rng.uniform(0, 60)]),
                arrival_time=NOW - rng.uniform(0, 3),
                priority=rng.choice([0, 0, 0, 1, -1]),
                streaming=streaming,
            )
            for i in range(rng.randint(0, 40))
        ]
        free_slots = rng.randint(-1, 20)
        out = sched.schedule(waiting, free_slots, NOW)
        _check_invariants(sched, waiting, free_slots, out)
        assert sched.schedule(list(reversed(waiting)), free_slots, NOW) == out


def test_scheduler_does_not_import_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import engine.scheduler\n"
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
