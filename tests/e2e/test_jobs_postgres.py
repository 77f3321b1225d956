"""Must-show 3 of issue 16: two server processes sharing one PostgreSQL database (a real server,
started by the fixture on a loopback port) drain 20 jobs between them, each completing exactly
once; killing one mid-job hands its lease to the other. Up to 4 jobs run at once per replica,
batched in its engine (greedy transcripts do not depend on batch mates)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from app.jobs.backends import open_store
from app.jobs.model import AttemptOutcome
from tests.conftest import manifest, require_speech_data
from tests.e2e.conftest import start_server
from tests.e2e.jobs_helpers import lro_body, recognize_text, transcripts, wait_done
from tests.postgres import PostgresServer, postgres_server  # noqa: F401 - fixture

JOBS = 20
LEASE_S = 3.0


def test_two_replicas_share_the_queue_and_take_over_a_dead_ones_lease(
    tmp_path: Path, postgres_server: PostgresServer  # noqa: F811
) -> None:
    require_speech_data()
    url = postgres_server.new_database()
    common = {"OASR_JOBS_DATABASE_URL": url, "OASR_JOBS_SPOOL_DIR": str(tmp_path / "spool"),
              "OASR_JOBS_MAX_RUNNING": "4", "OASR_JOBS_LEASE_SECS": str(LEASE_S),
              "OASR_JOBS_POLL_INTERVAL_SECS": "0.2"}
    a = start_server(tmp_path, {**common, "OASR_JOBS_REPLICA_ID": "replica-a", "OASR_DATA_DIR": str(tmp_path / "a")})
    b = start_server(tmp_path, {**common, "OASR_JOBS_REPLICA_ID": "replica-b", "OASR_DATA_DIR": str(tmp_path / "b")})
    store = open_store(url, tmp_path)
    try:
        short = [c for c in manifest() if c.text and c.duration <= 3.0 and c.channels == 1]
        clips = [short[i % len(short)] for i in range(JOBS)]
        names = []
        for i, clip in enumerate(clips):  # submitted to both replicas
            srv = a if i % 2 else b
            r = httpx.post(f"{srv.base_url}/v1/speech:longrunningrecognize?extensions=true",
                           json=lro_body(clip.path.read_bytes()), timeout=60)
            assert r.status_code == 200, r.text
            names.append(r.json()["name"])

        # kill b while it runs jobs, once it has completed at least one
        deadline = time.monotonic() + 300
        while True:
            assert time.monotonic() < deadline, "replica-b never ran a job"
            b_done = any(x.owner == "replica-b" and x.outcome is AttemptOutcome.SUCCEEDED
                         for n in names for x in store.attempts(n))
            running_b = [n for n in names if store.get(n).lease_owner == "replica-b"]
            if b_done and running_b:
                break
            time.sleep(0.02)
        b.proc.kill()
        b.proc.wait()
        # what b held when it died (it may have finished some of running_b between the check and the kill)
        victims = [n for n in names if store.get(n).lease_owner == "replica-b"]
        assert victims, "replica-b finished every job it held before the kill; nothing was handed over"

        done = [wait_done(a.base_url, n, timeout=600) for n in names]
        distinct = sorted(set(clips), key=lambda c: c.id)
        with ThreadPoolExecutor(len(distinct)) as pool:  # at once: the engine batches them
            texts = pool.map(lambda c: recognize_text(a.base_url, c.path.read_bytes()), distinct)
        expected = {c.id: t for c, t in zip(distinct, texts)}
        for op, clip in zip(done, clips):
            assert op["metadata"]["state"] == "SUCCEEDED", op
            assert transcripts(op) == expected[clip.id]

        owners = set()
        for name in names:
            attempts = store.attempts(name)
            succeeded = [x for x in attempts if x.outcome is AttemptOutcome.SUCCEEDED]
            assert len(succeeded) == 1, attempts  # each job completed exactly once
            owners.add(succeeded[0].owner)
        assert owners == {"replica-a", "replica-b"}  # both drained the queue
        for victim in victims:  # the dead replica's leases expired and replica-a took its jobs over
            attempts = store.attempts(victim)
            assert [(x.owner, x.outcome) for x in attempts[-2:]] == [
                ("replica-b", AttemptOutcome.EXPIRED), ("replica-a", AttemptOutcome.SUCCEEDED)], attempts
    finally:
        store.close()
        a.terminate()
        if b.proc.poll() is None:
            b.terminate()
