"""benchmarks/overload.py: its accounting and arrival process on their own, and one short run
against a real server whose admission limit is tiny, so the offered work is refused: every
offered request has exactly one outcome, and no refusal lacks its retry hint (no speed asserted)."""

from __future__ import annotations

import math

import pytest

from app.admission import LIVE_LATE_HOLD_S
from app.backlog import LIVE_RETRY_AFTER_S
from benchmarks import overload
from benchmarks.overload import Outcome


def test_poisson_arrivals_are_seeded_and_near_their_rate() -> None:
    times = overload.arrival_times(5.0, 60.0, "poisson")
    assert times == overload.arrival_times(5.0, 60.0, "poisson")  # the same schedule every run
    assert times == sorted(times) and times[0] > 0 and times[-1] < 60.0
    # 300 expected; a Poisson count's standard deviation is sqrt(300) ≈ 17, so ±60 is 3.5 sigma
    assert abs(len(times) - 300) < 60


def test_uniform_arrivals_are_evenly_spaced() -> None:
    assert overload.arrival_times(2.0, 3.0, "uniform") == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert overload.arrival_times(0.0, 3.0, "uniform") == []


def test_a_row_accounts_for_every_offered_request() -> None:
    alone = Outcome("served", 2.0, text="hello")
    outs = [Outcome("served", 3.0, text="hello"), Outcome("served", 40.0, text="other"),
            Outcome("refused_hint", 0.1, detail="HTTP 503", retry_after_s=7.0), Outcome("refused_bare", 0.1, detail="HTTP 503 bare"),
            Outcome("lost", 300.0, detail="ReadTimeout")]
    row = overload.surface_row("http", 6, outs, alone, max_queue_delay_s=30.0)
    # one offered request never came back: it is lost too
    assert (row["served"], row["refused_with_retry"], row["refused_without_retry"], row["lost"]) == (2, 1, 1, 2)
    assert row["served_same_text_as_alone"] == 1
    assert row["retry_after_p50_s"] == row["retry_after_max_s"] == 7.0
    assert "wait p50 7 s, max 7 s" in overload.markdown([row], 30.0)
    assert row["accepted_p99_s"] == 40.0 and row["p99_within_limit"] is False  # 40 > 30 + 2
    assert row["examples"] == ["HTTP 503 bare", "ReadTimeout"]
    failures = overload.hard_failures([row, overload.live_row([overload.LiveResult(finals=[0.5])])])
    assert failures == ["http: 2 lost", "http: 1 refused without a retry hint"]
    shed = overload.LiveResult(failed="realtime error: shed", finals=[0.4])
    assert overload.hard_failures([overload.live_row([shed])]) == ["live (pre-admitted): 1 admitted and then failed"]
    gated = overload.LiveResult(refused="HTTP 503 on the upgrade, Retry-After 10")  # the live gate, not a loss
    assert overload.hard_failures([overload.live_row([gated])]) == []


def test_a_refusal_counts_as_hinted_only_with_a_whole_number() -> None:
    assert overload._refusal(0.1, "HTTP 503", "3", 1.0).retry_after_s == 3.0
    assert overload._refusal(0.1, "RESOURCE_EXHAUSTED", "2000", 1000.0).retry_after_s == 2.0
    for hint in (None, "", "soon", "-1", "1.5"):
        out = overload._refusal(0.1, "HTTP 503", hint, 1.0)
        assert out.kind == "refused_bare" and out.retry_after_s is None


@pytest.mark.slow
def test_short_overload_run_accounts_for_every_request() -> None:
    plan = overload.Plan(duration_s=4.0, factor=4.0, max_queue_delay_secs=0.5, live_sessions=2, capacity_s=2.0,
                         capacity_concurrency=2, clip="mfa_thoughts", alone_runs=1)
    result = overload.run(plan)
    rows = {r["surface"]: r for r in result["rows"]}
    assert result["max_queue_delay_s"] == 0.5  # the server took the override
    assert sum(rows[s]["offered"] for s in overload.SURFACES) == result["offered"] > 0
    for surface in overload.SURFACES:
        r = rows[surface]
        assert r["served"] + r["refused_with_retry"] + r["refused_without_retry"] + r["lost"] == r["offered"], r
        assert r["refused_without_retry"] == 0 and r["lost"] == 0, r
        assert r["served_same_text_as_alone"] <= r["served"]
        assert r["served"] == 0 or r["accepted_p50_s"] <= r["accepted_p99_s"]
    # new realtime sessions are judged by the live gate (admitted up to the measured live capacity,
    # its own Retry-After: a shed pass's settling, or the rest of a late pass's hold), never by the
    # offline backlog this run keeps over its 0.5 s limit
    realtime = rows["realtime"]
    live_gate_hints = {LIVE_RETRY_AFTER_S, *range(1, math.ceil(LIVE_LATE_HOLD_S) + 1)}
    assert realtime["refused_with_retry"] == 0 or realtime["retry_after_max_s"] in live_gate_hints, realtime
    live = rows["live (pre-admitted)"]
    assert live["sessions"] == 2 and live["refused"] == 0 and live["failed"] == 0, live
    assert live["turns"] >= 2 and math.isfinite(live["final_p95_s"])
    server = rows["server (/readyz)"]  # the admission's own view while the load was offered
    assert server["samples"] > 0 and server["inflight_max"] >= plan.live_sessions, server
    assert result["failures"] == []
