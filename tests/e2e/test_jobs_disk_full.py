"""Fault (b) of issue 35: the job spool's disk is full. A real server whose data directory (job
database and audio spool) is a 4 MiB tmpfs, filled up but for a few KiB: a submission answers
HTTP 507 with status RESOURCE_EXHAUSTED and a message saying the disk is full, and nothing is
half-written (no operation, no spool file, no temporary file). Once space is freed the same
submission succeeds. Mounting needs CAP_SYS_ADMIN; tests/jobs/test_store.py covers the same
refusal at the spool's write seam where it is missing."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from engine.models.fake import write_checkpoint
from tests.e2e.conftest import start_server
from tests.e2e.jobs_helpers import lro_body, transcripts, wait_done

DISK_BYTES = 4 * 2**20
LEFT_FREE_BYTES = 16 * 2**10  # after the filler: less than the audio needs


@contextlib.contextmanager
def tiny_disk(path: Path) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the write-seam test covers this")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def wav(seconds: float) -> bytes:
    t = np.arange(int(seconds * 16000)) / 16000
    buf = io.BytesIO()
    sf.write(buf, 0.3 * np.sin(2 * np.pi * 220 * t), 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def fill(disk: Path) -> Path:
    """A file taking all of the disk's free space but LEFT_FREE_BYTES."""
    stat = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - LEFT_FREE_BYTES))
    return filler


def test_a_full_spool_disk_is_a_clear_507_with_nothing_half_written(tmp_path: Path) -> None:
    audio = wav(3.0)  # 94 KiB: more than is left
    assert len(audio) > 2 * LEFT_FREE_BYTES
    with tiny_disk(tmp_path / "disk") as disk:
        ckpt = write_checkpoint(str(tmp_path / "ckpt"))
        server = start_server(tmp_path, env={"OASR_CKPT_DIR": ckpt, "OASR_DATA_DIR": str(disk),
                                             "OASR_JOBS_POLL_INTERVAL_SECS": "0.1"})
        try:
            filler = fill(disk)
            r = httpx.post(f"{server.base_url}/v1/speech:longrunningrecognize?extensions=true", json=lro_body(audio), timeout=60)
            assert r.status_code == 507, r.text
            error = r.json()["error"]
            assert error["status"] == "RESOURCE_EXHAUSTED" and "disk is full" in error["message"], error

            listed = httpx.get(f"{server.base_url}/v1/operations?extensions=true", timeout=30)
            assert listed.status_code == 200 and listed.json().get("operations", []) == [], listed.text
            spool = disk / "spool"
            assert sorted(p.name for p in spool.glob("??/*")) == []  # no audio file, whole or partial
            assert list((spool / "tmp").iterdir()) == []  # and no temporary left behind

            filler.unlink()
            r = httpx.post(f"{server.base_url}/v1/speech:longrunningrecognize?extensions=true", json=lro_body(audio), timeout=60)
            assert r.status_code == 200, r.text
            op = wait_done(server.base_url, r.json()["name"], timeout=120)
            assert op["metadata"]["state"] == "SUCCEEDED", op
            assert transcripts(op) == {0: " ".join(["loud"] * 30)}
        finally:
            server.terminate()
