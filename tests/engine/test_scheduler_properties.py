"""engine.scheduler on random synthetic queues (seeded, so a failure reproduces): the invariants
every policy keeps on every call, and the starvation bound over a simulated run."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from engine.scheduler import POLICIES, Scheduler, SchedulerOutput, WaitingRequest

LENGTH_AWARE = ("window", "bucket", "sjf")


def random_scheduler(rng: random.Random, max_batch_size: int) -> Scheduler:
    sizes = rng.sample(range(1, max_batch_size + 1), k=rng.randint(1, min(3, max_batch_size)))
    return Scheduler(
        policy=rng.choice(POLICIES),
        max_batch_size=max_batch_size,
        max_wait_time=rng.choice([0.0, 0.5, 1.0]),
        length_window_factor=rng.choice([1.0, 1.5, 2.0, 4.0]),
        max_pad_ratio=rng.choice([1.0, 1.2, 2.0, 4.0, 50.0]),
        length_bucket_ratio=rng.choice([0.0, 0.0, 0.3, 0.8]),
        preferred_batch_size=sizes if rng.random() < 0.4 else (),
        streaming_cohort_admit=rng.random() < 0.7,
    )


def random_request(rng: random.Random, rid: str, arrival: float, now: float) -> WaitingRequest:
    streaming = rng.random() < 0.25
    # A stream's length is the audio it buffered while waiting; files are anything from silence to a minute.
    length = now - arrival if streaming else rng.choice([0.0, 0.5, 3.0, rng.uniform(0, 60)])
    return WaitingRequest(rid, length, arrival, rng.choice([0, 0, 0, 1, -1]), streaming)


def check_call(sched: Scheduler, waiting: list[WaitingRequest], free_slots: int, now: float,
               out: SchedulerOutput) -> None:
    by_id = {w.request_id: w for w in waiting}
    capacity = min(max(free_slots, 0), sched.max_batch_size)
    assert len(out.admitted) == len(set(out.admitted)), "duplicate admission"
    assert set(out.admitted) <= set(by_id), "admitted an unknown id"
    assert len(out.admitted) <= capacity

    urgency = sorted(waiting, key=WaitingRequest.urgency)
    starved = {w.request_id for w in urgency if now - w.arrival_time >= sched.max_wait_time}
    # Live streams first, whatever the offline work's wait: the overdue ones most urgent first, then
    # the rest in cohort (or arrival) order; then overdue offline requests, most urgent first.
    fresh = sorted((w for w in urgency if w.streaming and w.request_id not in starved),
                   key=WaitingRequest.shortness if sched.streaming_cohort_admit else WaitingRequest.urgency)
    streams = [w.request_id for w in urgency if w.streaming and w.request_id in starved] + \
        [w.request_id for w in fresh]
    flushed = [w.request_id for w in urgency if not w.streaming and w.request_id in starved]
    n_streams = min(len(streams), len(out.admitted))  # a preferred size may admit fewer than fit
    assert list(out.admitted[:n_streams]) == streams[:n_streams]
    n_flushed = min(len(flushed), len(out.admitted) - n_streams)
    assert list(out.admitted[n_streams : n_streams + n_flushed]) == flushed[:n_flushed]

    unsnapped = replace_knobs(sched, preferred_batch_size=()).schedule(waiting, free_slots, now)
    if starved or not sched.preferred_batch_size:
        assert out == unsnapped  # the escape valve: nothing is snapped while anything is starved
        if waiting and capacity:
            assert out.admitted, "idle while requests wait"
        assert [r for r in out.admitted if by_id[r].streaming] == streams[:capacity]
        offline_rest = [w for w in urgency if not w.streaming and w.request_id not in starved]
        room = capacity - min(len(streams), capacity) - min(len(flushed), capacity)
        if out.policy in ("window", "fcfs") and offline_rest and room > 0:
            assert offline_rest[0].request_id in out.admitted, "window/fcfs passed over the most urgent file"
    else:
        assert len(out.admitted) in (0, *sched.preferred_batch_size)
        assert len(out.admitted) + out.held == len(unsnapped.admitted)
        if out.held:
            assert out.next_admit_time == min(w.arrival_time for w in waiting) + sched.max_wait_time > now
        else:
            assert out == unsnapped and out.next_admit_time is None

    lengths = [by_id[r].length for r in out.admitted if not by_id[r].streaming]
    assert out.useful_length == pytest.approx(sum(lengths))
    assert out.padded_length == pytest.approx(max(lengths, default=0.0) * len(lengths))
    if out.policy in LENGTH_AWARE and len(lengths) > 1 and max(lengths) > 0:
        assert out.pad_ratio <= sched.max_pad_ratio * (1 + 1e-12)
        assert min(lengths) >= sched.length_bucket_ratio * max(lengths)


def replace_knobs(sched: Scheduler, **changes: object) -> Scheduler:
    knobs = dict(policy=sched.policy, max_batch_size=sched.max_batch_size, max_wait_time=sched.max_wait_time,
                 length_window_factor=sched.length_window_factor, max_pad_ratio=sched.max_pad_ratio,
                 length_bucket_ratio=sched.length_bucket_ratio, preferred_batch_size=sched.preferred_batch_size,
                 streaming_cohort_admit=sched.streaming_cohort_admit)
    return Scheduler(**{**knobs, **changes})  # type: ignore[arg-type]


def test_every_call_keeps_the_invariants_and_is_deterministic() -> None:
    rng = random.Random(20261129)
    now = 100.0
    for _ in range(400):
        sched = random_scheduler(rng, max_batch_size=rng.randint(1, 12))
        waiting = [random_request(rng, f"r{i}", now - rng.uniform(0, 1.5), now) for i in range(rng.randint(0, 40))]
        free_slots = rng.randint(-1, 20)
        out = sched.schedule(waiting, free_slots, now)
        check_call(sched, waiting, free_slots, now, out)
        shuffled = waiting[:]
        rng.shuffle(shuffled)
        assert sched.schedule(shuffled, free_slots, now) == out


@pytest.mark.parametrize("policy", POLICIES)
def test_no_request_waits_past_max_wait_time_plus_one_step(policy: str) -> None:
    """A simulated engine: requests arrive between steps; every step the scheduler gets the whole
    batch free (capacity above the most that can be waiting, so the bound is not a capacity
    question). Every request is admitted within max_wait_time plus one step."""
    rng = random.Random(f"starvation-{policy}")
    for _ in range(25):
        sched = replace_knobs(random_scheduler(rng, max_batch_size=64), policy=policy)
        step = rng.choice([0.1, 0.25])
        now, arrivals = 0.0, 0
        waiting: dict[str, WaitingRequest] = {}
        for tick in range(200):
            if tick < 150:  # then no more arrivals: the queue must drain
                for _ in range(rng.randint(0, 2)):
                    rid = f"r{arrivals}"
                    arrivals += 1
                    waiting[rid] = random_request(rng, rid, now - rng.uniform(0, step), now)
            # live streams keep buffering while they wait
            queue = [replace(w, length=now - w.arrival_time) if w.streaming else w for w in waiting.values()]
            out = sched.schedule(queue, sched.max_batch_size, now)
            check_call(sched, queue, sched.max_batch_size, now, out)
            for rid in out.admitted:
                assert now - waiting.pop(rid).arrival_time <= sched.max_wait_time + step + 1e-9, (rid, out)
            now += step
        assert not waiting, f"{len(waiting)} requests never admitted"


@pytest.mark.parametrize("policy", POLICIES)
def test_offline_work_is_not_starved_by_live_streams_below_overload(policy: str) -> None:
    """Live streams go first, but while they leave slots free offline work still gets in: new
    sessions take one slot a step, files two of the rest; every file is admitted within
    max_wait_time plus one step, however long it is."""
    rng = random.Random(f"live-share-{policy}")
    sched = Scheduler(policy=policy, max_batch_size=4, max_wait_time=1.0, max_pad_ratio=1.5)
    step, now = 0.25, 0.0
    waiting: dict[str, WaitingRequest] = {}
    for tick in range(240):
        if tick < 200:
            waiting[f"s{tick}"] = WaitingRequest(f"s{tick}", 0.0, now, 0, streaming=True)
            for k in range(2 if tick % 2 else 1):  # 1.5 files a step, into the 3 slots the stream leaves
                rid = f"f{tick}-{k}"
                waiting[rid] = WaitingRequest(rid, rng.choice([0.5, 3.0, 60.0]), now, rng.choice([0, 10]))
        out = sched.schedule(list(waiting.values()), 4, now)
        assert tick >= 200 or out.admitted[0] == f"s{tick}"  # a new session is never kept waiting
        for rid in out.admitted:
            assert now - waiting.pop(rid).arrival_time <= sched.max_wait_time + step + 1e-9, (rid, out)
        now += step
    assert not waiting
