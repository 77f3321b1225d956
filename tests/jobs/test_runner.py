"""The job runner against a stand-in for the serving bridge (no engine): it opens every
channel's request at once at the jobs' priority, turns window outputs into progress, and
builds one result per channel."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from app.audio import AudioDecoder
from app.google.jobs import GoogleJobCodec
from app.jobs.model import Job, JobState
from app.jobs.runner import JobRuntime, OneService, recognize_job
from app.jobs.spool import Spool, digest_of
from app.metrics import Metrics
from app.output_stream import OutputStream
from engine import RequestOutput
from protos.oasr.speech.v1 import speech_pb2 as pb

RATE = 16000


class Bridge:
    """Records `open_request` calls; each request reports two windows, then its text."""

    def __init__(self) -> None:
        self.metrics = Metrics()
        self.sample_rate = RATE
        self.opened: list[dict[str, Any]] = []
        self.closed: list[str] = []

    def open_request(self, samples: np.ndarray, *, decoding: Any = None, priority: int = 0) -> OutputStream:
        rid = f"r{len(self.opened)}"
        self.opened.append({"seconds": len(samples) / RATE, "priority": priority})
        stream = OutputStream(rid)
        seconds = len(samples) / RATE
        loop = asyncio.get_running_loop()
        loop.call_soon(stream.put, RequestOutput(rid, duration=seconds / 2))
        loop.call_soon(stream.put, RequestOutput(rid, text=f"channel of {seconds:.0f} s", finished=True,
                                                 finish_reason="stop", duration=seconds))
        return stream

    def close(self, request_id: str) -> None:
        self.closed.append(request_id)


async def test_channels_are_opened_together_at_job_priority_with_progress(tmp_path: Path) -> None:
    stereo = np.zeros((4 * RATE, 2), dtype=np.float32)
    buf = io.BytesIO()
    sf.write(buf, stereo, RATE, format="WAV")
    data = buf.getvalue()
    spool = Spool(tmp_path)
    spool.place(digest_of(data), data)
    config = pb.RecognitionConfig(encoding=pb.RecognitionConfig.AUTO, enable_separate_recognition_per_channel=True)
    request = pb.LongRunningRecognizeRequest(config=config)
    job = Job("j", JobState.RUNNING, request.SerializeToString(), digest_of(data), None, 0, 0.0, 0.0, None, None, 1,
              "me", None, None, None, None, None, None, None, 0, None, None, None)
    bridge = Bridge()
    progress: list[int] = []

    async def on_progress(p: int) -> None:
        progress.append(p)

    with AudioDecoder(1) as decoder:
        runtime = JobRuntime(services=OneService(bridge), decoder=decoder, spool=spool, audio_uri_root=None,  # type: ignore[arg-type]
                             max_audio_seconds=60, priority=10, codec=GoogleJobCodec())
        response = pb.LongRunningRecognizeResponse.FromString(await recognize_job(job, runtime, on_progress))
    assert bridge.opened == [{"seconds": 4.0, "priority": 10}, {"seconds": 4.0, "priority": 10}]
    assert sorted(bridge.closed) == ["r0", "r1"]
    assert progress == sorted(progress) and progress[-1] < 100 and 0 < progress[0] <= 50
    assert [(r.channel_tag, r.alternatives[0].transcript) for r in response.results] == [
        (1, "channel of 4 s"), (2, "channel of 4 s")]
    assert response.oasr_request_id == "j" and response.total_billed_time.seconds == 4
