"""Must-show 1 of issue 16: a 5-minute recording made of dev clips as one batch job, submitted
over gRPC, its progress polled to 100 % over REST and with the standard Operations stub, and
its result equal to `speech:recognize` on the same audio."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf import duration_pb2

from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.conftest import SAMPLE_RATE, reference_clips
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.jobs_helpers import recognize_text, wav_bytes

pytestmark = pytest.mark.slow
MIN_SECONDS = 300.0
GAP = np.zeros(SAMPLE_RATE, dtype=np.float32)


@pytest.fixture(scope="module")
def recording() -> bytes:
    clips = [c for c in reference_clips() if c.duration <= 30.0]
    assert clips, "no dev clip of 30 s or less with a reference transcript"
    parts: list[np.ndarray] = []
    total = 0
    while total < MIN_SECONDS * SAMPLE_RATE:
        for clip in clips:
            parts += [clip.audio, GAP]
            total += len(clip.audio) + len(GAP)
    return wav_bytes(np.concatenate(parts), fmt="FLAC")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("longform"), {"OASR_REQUEST_TIMEOUT_SECS": "1800",
                                                             "OASR_JOBS_POLL_INTERVAL_SECS": "0.2"})
    yield srv
    srv.terminate()


def test_five_minute_job_progresses_to_100_and_matches_recognize(server: ServerProcess, recording: bytes) -> None:
    config = pb.RecognitionConfig(encoding=pb.RecognitionConfig.AUTO, language_code="en-US")
    with grpc.insecure_channel(server.grpc_target) as channel:
        submitted = speech_pb2_grpc.SpeechStub(channel).LongRunningRecognize(
            pb.LongRunningRecognizeRequest(config=config, audio=pb.RecognitionAudio(content=recording)), timeout=60)
        assert not submitted.done
        ops = operations_pb2_grpc.OperationsStub(channel)
        progress: list[int] = []
        op = submitted
        while not op.done:  # alternate the two surfaces; both read the same store
            rest = httpx.get(f"{server.base_url}/v1/operations/{submitted.name}?extensions=true", timeout=30).json()
            progress.append(rest["metadata"]["progressPercent"])
            wait = operations_pb2.WaitOperationRequest(name=submitted.name, timeout=duration_pb2.Duration(nanos=300_000_000))
            op = ops.WaitOperation(wait, timeout=30)
            meta = pb.LongRunningRecognizeMetadata()
            meta.ParseFromString(op.metadata.value)
            progress.append(meta.progress_percent)
        final = ops.GetOperation(operations_pb2.GetOperationRequest(name=submitted.name), timeout=30)
    assert final.HasField("response"), final.error
    response = pb.LongRunningRecognizeResponse()
    response.ParseFromString(final.response.value)
    meta = pb.LongRunningRecognizeMetadata()
    meta.ParseFromString(final.metadata.value)
    assert meta.progress_percent == 100 and meta.state == pb.LongRunningRecognizeMetadata.SUCCEEDED
    assert progress == sorted(progress), progress  # never goes back
    assert any(0 < p < 100 for p in progress), progress  # observed per 30 s window, not only 0 and 100
    assert response.total_billed_time.seconds >= MIN_SECONDS

    expected = recognize_text(server.base_url, recording)
    assert {r.channel_tag: r.alternatives[0].transcript for r in response.results} == expected
    rest_done = httpx.get(f"{server.base_url}/v1/operations/{submitted.name}?extensions=true", timeout=30).json()
    assert rest_done["response"]["results"][0]["alternatives"][0]["transcript"] == expected[0]
    assert len(expected[0].split()) > 300  # five minutes of speech, not one window
