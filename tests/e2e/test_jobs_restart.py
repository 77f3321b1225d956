"""Must-show 2 of issue 16: SIGKILL the server while one job runs and three are queued; after a
restart on the same data dir all four finish with the right results, and the store's records
show each completed exactly once. The results are compared byte for byte with what
`speech:recognize` returned on the first start (issue 35: a start-up timing once chose the
numeric path, and a restarted job came back with different words)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np

from app.jobs.backends import open_store
from app.jobs.model import AttemptOutcome, JobState
from tests.conftest import load_clip, manifest, require_speech_data
from tests.e2e.conftest import start_server
from tests.e2e.jobs_helpers import lro_body, recognize_text, transcripts, wait_done, wav_bytes

QUEUED_CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "ps_cards_005")


def test_sigkill_loses_no_job_and_none_completes_twice(tmp_path: Path) -> None:
    require_speech_data()
    data = tmp_path / "data"
    env = {"OASR_DATA_DIR": str(data), "OASR_JOBS_MAX_RUNNING": "1", "OASR_JOBS_POLL_INTERVAL_SECS": "0.1"}
    audios = [wav_bytes(np.concatenate([load_clip("jfk_inaugural")] * 3), fmt="FLAC")]  # 33 s: runs a while
    audios += [next(c for c in manifest() if c.id == cid).path.read_bytes() for cid in QUEUED_CLIPS]

    first = start_server(tmp_path, env)
    try:
        before_kill = [recognize_text(first.base_url, audio) for audio in audios]
        names = []
        for audio in audios:
            r = httpx.post(f"{first.base_url}/v1/speech:longrunningrecognize?extensions=true", json=lro_body(audio), timeout=60)
            assert r.status_code == 200, r.text
            names.append(r.json()["name"])
        deadline = time.monotonic() + 120
        while httpx.get(f"{first.base_url}/v1/operations/{names[0]}?extensions=true").json()["metadata"]["state"] != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        first.proc.kill()  # SIGKILL: no drain, no release
        first.proc.wait()

    store = open_store(None, data)
    try:
        states = [store.get(n).state for n in names]
        assert states == [JobState.RUNNING] + [JobState.QUEUED] * 3, states  # what the kill interrupted
        dead_owner = store.get(names[0]).lease_owner

        second = start_server(tmp_path, env)
        try:
            done = [wait_done(second.base_url, n) for n in names]
            for op, expected in zip(done, before_kill):
                assert op["metadata"]["state"] == "SUCCEEDED", op
                assert transcripts(op) == expected  # byte for byte, across the two starts
        finally:
            second.terminate()

        for i, name in enumerate(names):
            attempts = store.attempts(name)
            succeeded = [a for a in attempts if a.outcome is AttemptOutcome.SUCCEEDED]
            assert len(succeeded) == 1, attempts  # completed exactly once
            if i == 0:  # the one that was running: its first attempt died with the server
                assert [a.outcome for a in attempts] == [AttemptOutcome.EXPIRED, AttemptOutcome.SUCCEEDED]
                assert attempts[0].owner == dead_owner != attempts[1].owner
            else:
                assert len(attempts) == 1
    finally:
        store.close()


def test_sigterm_gives_a_running_job_back_to_the_queue(tmp_path: Path) -> None:
    require_speech_data()
    data = tmp_path / "data"
    server = start_server(tmp_path, {"OASR_DATA_DIR": str(data), "OASR_JOBS_POLL_INTERVAL_SECS": "0.1"})
    try:
        audio = wav_bytes(np.concatenate([load_clip("jfk_inaugural")] * 4), fmt="FLAC")  # 44 s
        name = httpx.post(f"{server.base_url}/v1/speech:longrunningrecognize?extensions=true", json=lro_body(audio),
                          timeout=60).json()["name"]
        deadline = time.monotonic() + 120
        while httpx.get(f"{server.base_url}/v1/operations/{name}?extensions=true").json()["metadata"]["state"] != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        assert server.terminate() == 0  # drained
    store = open_store(None, data)
    try:
        assert store.get(name).state is JobState.QUEUED
        assert [a.outcome for a in store.attempts(name)] == [AttemptOutcome.RELEASED]
    finally:
        store.close()
