"""engine/host_load.py: other processes' CPU use from the host's busy time less this process's own,
sampled at most every SAMPLE_EVERY_S (the runner widens offline decoder steps only while it is low)."""

from __future__ import annotations

from engine.host_load import OTHERS_IDLE_CORES, SAMPLE_EVERY_S, HostLoad, read_proc_stat


class Host:
    def __init__(self) -> None:
        self.now = 0.0
        self.busy = 100.0
        self.own = 5.0

    def run(self, seconds: float, own_cores: float, other_cores: float) -> None:
        self.now += seconds
        self.own += own_cores * seconds
        self.busy += (own_cores + other_cores) * seconds


def gauge(host: Host) -> HostLoad:
    return HostLoad(read=lambda: (host.busy, 1e6), own=lambda: host.own, clock=lambda: host.now)


def test_our_own_work_does_not_count_as_load() -> None:
    host = Host()
    load = gauge(host)
    host.run(SAMPLE_EVERY_S, own_cores=2.0, other_cores=0.0)
    assert load.others_idle() and load.others == 0.0


def test_another_busy_process_is_seen_within_one_interval_and_its_end_too() -> None:
    host = Host()
    load = gauge(host)
    host.run(SAMPLE_EVERY_S, own_cores=1.0, other_cores=1.0)
    assert not load.others_idle() and abs(load.others - 1.0) < 1e-9
    host.run(SAMPLE_EVERY_S / 2, own_cores=1.0, other_cores=0.0)
    assert not load.others_idle()  # the last interval's reading holds until the next one
    host.run(SAMPLE_EVERY_S, own_cores=1.0, other_cores=OTHERS_IDLE_CORES / 2)
    assert load.others_idle()


def test_an_unreadable_host_is_never_taken_as_idle() -> None:
    load = HostLoad(read=lambda: None)
    assert not load.known and not load.others_idle()


def test_this_linux_host_is_readable() -> None:
    stat = read_proc_stat()
    assert stat is not None and 0 < stat[0] <= stat[1]
