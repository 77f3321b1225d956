"""Fault (c) of issue 35: PostgreSQL restarts while two replicas hold job leases. A real
PostgreSQL server (tests/postgres.py) is stopped with its connections terminated while each of
two replicas runs a job, and stays down until both replicas have tried to write to it mid-job
(the halfway progress); then it comes back. The jobs continue: each succeeds in the attempt
that was running, once, with the transcript speech:recognize gives. Before the fix the failed
progress write failed its job ('internal error: OperationalError'); its end could not be
written either, so the job ran again from the start after its lease expired (and where the
database came back first, it stayed FAILED). The lease outlasts the outage here, so no replica
may take a job over; tests/e2e/test_jobs_postgres.py covers a takeover completing once."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.jobs.backends import open_store
from app.jobs.model import AttemptOutcome, JobState
from app.jobs.store import SqlJobStore
from tests.conftest import load_clip, require_speech_data
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.jobs_helpers import lro_body, recognize_text, transcripts, wait_done, wav_bytes
from tests.postgres import PostgresServer, postgres_server  # noqa: F401 - fixture

OUTAGE_LIMIT_S = 600.0  # a bound on the wait for the replicas' mid-job writes, not a timing
LEASE_S = 2 * OUTAGE_LIMIT_S  # no lease can expire during the outage
MIDJOB_WRITE = re.compile(r"progress \d+% not recorded|failed unexpectedly")
"""What a replica logs when a job's progress write meets the stopped store: after the fix the
job goes on, before it the job failed for it."""


def retrying(read: Any, timeout: float = 60.0) -> Any:
    """`read()` through the test's own store connection, which the restart breaks once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return read()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def wait_for_midjob_writes(replicas: list[ServerProcess]) -> None:
    deadline = time.monotonic() + OUTAGE_LIMIT_S
    while not all(MIDJOB_WRITE.search(r.log()) for r in replicas):
        assert time.monotonic() < deadline, [r.log()[-2000:] for r in replicas]
        time.sleep(0.2)


@pytest.mark.slow
def test_a_postgres_restart_under_held_leases_loses_no_job_and_completes_none_twice(
    tmp_path: Path, postgres_server: PostgresServer  # noqa: F811
) -> None:
    require_speech_data()
    url = postgres_server.new_database()
    common = {"OASR_JOBS_DATABASE_URL": url, "OASR_JOBS_SPOOL_DIR": str(tmp_path / "spool"),
              "OASR_JOBS_MAX_RUNNING": "1", "OASR_JOBS_LEASE_SECS": str(LEASE_S),
              "OASR_JOBS_POLL_INTERVAL_SECS": "0.2"}
    replicas = [start_server(tmp_path, {**common, "OASR_JOBS_REPLICA_ID": f"replica-{x}",
                                        "OASR_DATA_DIR": str(tmp_path / x)}) for x in "ab"]
    store: SqlJobStore = open_store(url, tmp_path)
    try:
        audio = wav_bytes(np.concatenate([load_clip("jfk_inaugural")] * 3), fmt="FLAC")  # 33 s: two windows
        names = []
        for replica in replicas:
            r = httpx.post(f"{replica.base_url}/v1/speech:longrunningrecognize?extensions=true", json=lro_body(audio), timeout=60)
            assert r.status_code == 200, r.text
            names.append(r.json()["name"])

        deadline = time.monotonic() + 300
        while True:  # both replicas hold a lease
            assert time.monotonic() < deadline, "the replicas never ran the jobs at the same time"
            owners = {j.lease_owner for j in (store.get(n) for n in names) if j.state is JobState.RUNNING}
            if owners == {"replica-a", "replica-b"}:
                break
            time.sleep(0.05)
        postgres_server.stop_fast()
        try:
            wait_for_midjob_writes(replicas)
        finally:
            postgres_server.start_again()

        done = [wait_done(replicas[0].base_url, n, timeout=600) for n in names]
        expected = recognize_text(replicas[0].base_url, audio)
        for op in done:
            assert op["metadata"]["state"] == "SUCCEEDED", op
            assert transcripts(op) == expected
        for name in names:
            attempts = retrying(lambda n=name: store.attempts(n))
            # the attempt running at the stop went on and completed, once
            assert [a.outcome for a in attempts] == [AttemptOutcome.SUCCEEDED], attempts
    finally:
        with contextlib.suppress(Exception):
            store.close()
        for r in replicas:
            r.terminate()
