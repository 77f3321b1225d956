"""Batch jobs against a real server: per-channel recognition on every surface, bad input,
webhooks, cancel, list, audio.uri and the job metrics (issue 16, must-show 4, 5 and 6)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import soundfile as sf
from google.longrunning import operations_pb2, operations_pb2_grpc

from app.jobs.webhooks import verify
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.conftest import load_clip, manifest, require_speech_data
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.jobs_helpers import (
    WebhookReceiver,
    lro_body,
    pcm16,
    recognize_text,
    stereo,
    transcripts,
    wait_done,
    wav_bytes,
)
from tests.e2e.test_grpc import metric_value

SPOOL_MAX_MIB = 6.0
LEFT, RIGHT = "libri_61-70968-0000", "mfa_thoughts"  # two speakers, two texts
SHORT = "ps_cards_005"


@pytest.fixture(scope="module")
def uri_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("uri")
    root = base / "root"
    root.mkdir()
    clip = next(c for c in manifest() if c.id == SHORT)
    (root / "clip.flac").write_bytes(clip.path.read_bytes())
    (base / "outside.flac").write_bytes(clip.path.read_bytes())
    os.symlink(base / "outside.flac", root / "link.flac")  # a symlink inside the root pointing out of it
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, uri_root: Path) -> Iterator[ServerProcess]:
    require_speech_data()
    tmp = tmp_path_factory.mktemp("jobs-server")
    srv = start_server(tmp, {
        "OASR_DATA_DIR": str(tmp / "data"),
        "OASR_AUDIO_URI_ROOT": str(uri_root),
        "OASR_CALLBACK_ALLOWED_HOSTS": "127.0.0.1",
        "OASR_WEBHOOK_BACKOFF_SECS": "0.2",
        "OASR_JOBS_SPOOL_MAX_MIB": str(SPOOL_MAX_MIB),
        "OASR_JOBS_POLL_INTERVAL_SECS": "0.2",
        "OASR_JOBS_MAX_RUNNING": "1",
    })
    yield srv
    srv.terminate()


def submit(server: ServerProcess, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{server.base_url}/v1/speech:longrunningrecognize?extensions=true", json=body, timeout=60)
    assert r.status_code == 200, r.text
    op = r.json()
    assert op["done"] is False and op["metadata"]["state"] in ("QUEUED", "RUNNING")
    return dict(op)


def spool_files(server: ServerProcess) -> list[Path]:
    data = Path(server.log_path.parent / "data" / "spool")
    assert data.is_dir(), f"the spool is not at {data}"
    return sorted(p for p in data.rglob("*") if p.is_file())


# ---------------------------------------------------------------- per-channel (must-show 5)


def test_per_channel_results_match_each_channel_alone_on_every_surface(server: ServerProcess) -> None:
    audio, left, right = stereo(LEFT, RIGHT)
    alone = {1: recognize_text(server.base_url, wav_bytes(left))[0],
             2: recognize_text(server.base_url, wav_bytes(right))[0]}
    assert alone[1] != alone[2]

    # speech:recognize
    assert recognize_text(server.base_url, audio, enable_separate_recognition_per_channel="true") == alone
    mixed = recognize_text(server.base_url, audio)
    assert list(mixed) == [0]  # without the flag: mixed down, as before

    # speech:longrunningrecognize
    op = submit(server, lro_body(audio, audioChannelCount=2, enableSeparateRecognitionPerChannel=True))
    assert transcripts(wait_done(server.base_url, op["name"])) == alone

    # gRPC Recognize and StreamingRecognize (buffered until half-close on this offline server)
    config = pb.RecognitionConfig(encoding=pb.RecognitionConfig.AUTO, language_code="en-US", audio_channel_count=2,
                                  enable_separate_recognition_per_channel=True)
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = speech_pb2_grpc.SpeechStub(channel)
        response = stub.Recognize(pb.RecognizeRequest(config=config, audio=pb.RecognitionAudio(content=audio)),
                                  timeout=300)
        assert {r.channel_tag: r.alternatives[0].transcript for r in response.results} == alone

        def stream() -> Iterator[pb.StreamingRecognizeRequest]:
            yield pb.StreamingRecognizeRequest(streaming_config=pb.StreamingRecognitionConfig(config=config))
            for i in range(0, len(audio), 32000):
                yield pb.StreamingRecognizeRequest(audio_content=audio[i:i + 32000])

        [final] = list(stub.StreamingRecognize(stream(), timeout=300))
        assert {r.channel_tag: r.alternatives[0].transcript for r in final.results} == alone
        assert all(r.is_final for r in final.results)


def test_per_channel_on_the_dev_sets_stereo_recording(server: ServerProcess) -> None:
    clip = next(c for c in manifest() if c.id == "fw_stereo_diarization")
    data, rate = sf.read(clip.path, dtype="float32", always_2d=True)
    assert data.shape[1] == 2
    data = pcm16(data)
    alone = {tag: recognize_text(server.base_url, wav_bytes(data[:, tag - 1], rate)).get(0, "") for tag in (1, 2)}
    assert any(alone.values()), "neither channel of the stereo recording was transcribed"
    got = recognize_text(server.base_url, wav_bytes(data, rate), enable_separate_recognition_per_channel="true")
    assert got == {tag: text for tag, text in alone.items() if text}


# ---------------------------------------------------------------- bad input (must-show 6)


def test_unknown_operation_is_not_found_on_rest_and_grpc(server: ServerProcess) -> None:
    for method, path in (("GET", "/v1/operations/nope"), ("POST", "/v1/operations/nope:cancel"),
                         ("DELETE", "/v1/operations/nope")):
        r = httpx.request(method, server.base_url + path, timeout=10)
        assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND", r.text
    with grpc.insecure_channel(server.grpc_target) as channel:
        ops = operations_pb2_grpc.OperationsStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            ops.GetOperation(operations_pb2.GetOperationRequest(name="nope"), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_cancelling_a_finished_operation_is_a_failed_precondition(server: ServerProcess) -> None:
    clip = next(c for c in manifest() if c.id == SHORT)
    op = submit(server, lro_body(clip.path.read_bytes()))
    done = wait_done(server.base_url, op["name"])
    assert done["metadata"]["state"] == "SUCCEEDED"
    r = httpx.post(f"{server.base_url}/v1/operations/{op['name']}:cancel", timeout=10)
    assert r.status_code == 400 and r.json()["error"]["status"] == "FAILED_PRECONDITION"
    with grpc.insecure_channel(server.grpc_target) as channel:
        ops = operations_pb2_grpc.OperationsStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            ops.CancelOperation(operations_pb2.CancelOperationRequest(name=op["name"]), timeout=10)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        got = ops.GetOperation(operations_pb2.GetOperationRequest(name=op["name"]), timeout=10)
    assert got.done and got.HasField("response")


@pytest.mark.parametrize("body", [b"5", b"null", b"[]", b'"text"', b"{not json"])
def test_a_body_that_is_not_a_request_object_is_400(server: ServerProcess, body: bytes) -> None:
    r = httpx.post(f"{server.base_url}/v1/speech:longrunningrecognize?extensions=true", content=body,
                   headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT", r.text


@pytest.mark.parametrize("uri", [
    "file://{root}/../outside.flac",  # .. out of the root
    "file://{root}/link.flac",  # a symlink inside the root to a file outside it
    "file://{root}/missing.flac",
    "https://example.com/audio.flac",  # no outbound fetches
    "gs://bucket/audio.flac",
])
def test_audio_uri_outside_the_root_is_refused(server: ServerProcess, uri_root: Path, uri: str) -> None:
    uri = uri.format(root=uri_root)
    before = httpx.get(f"{server.base_url}/v1/operations?pageSize=1000&extensions=true", timeout=10).json()["operations"]
    r = httpx.post(f"{server.base_url}/v1/speech:longrunningrecognize?extensions=true", json=lro_body(uri=uri), timeout=10)
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT", r.text
    with grpc.insecure_channel(server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as err:
            speech_pb2_grpc.SpeechStub(channel).LongRunningRecognize(
                pb.LongRunningRecognizeRequest(config=pb.RecognitionConfig(encoding=pb.RecognitionConfig.AUTO),
                                               audio=pb.RecognitionAudio(uri=uri)), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    after = httpx.get(f"{server.base_url}/v1/operations?pageSize=1000&extensions=true", timeout=10).json()["operations"]
    assert len(after) == len(before)


def test_audio_uri_under_the_root_is_recognized_like_content(server: ServerProcess, uri_root: Path) -> None:
    clip = next(c for c in manifest() if c.id == SHORT)
    op = submit(server, lro_body(uri=f"file://{uri_root}/clip.flac"))
    assert op["metadata"]["uri"] == f"file://{uri_root}/clip.flac"
    done = wait_done(server.base_url, op["name"])
    assert transcripts(done) == recognize_text(server.base_url, clip.path.read_bytes())


def test_full_spool_refuses_the_job_with_nothing_written(server: ServerProcess) -> None:
    loud = np.tile(load_clip("libri_2412-153948-0000"), 20)  # ~233 s: a 7.5 MB WAV, over the 6 MiB spool
    audio = wav_bytes(loud)
    assert len(audio) > SPOOL_MAX_MIB * 2**20
    files = spool_files(server)
    before = httpx.get(f"{server.base_url}/v1/operations?pageSize=1000&extensions=true", timeout=10).json()["operations"]
    r = httpx.post(f"{server.base_url}/v1/speech:longrunningrecognize?extensions=true", json=lro_body(audio), timeout=60)
    assert r.status_code == 429 and r.json()["error"]["status"] == "RESOURCE_EXHAUSTED", r.text
    with grpc.insecure_channel(server.grpc_target, options=[("grpc.max_send_message_length", 2**26)]) as channel:
        with pytest.raises(grpc.RpcError) as err:
            speech_pb2_grpc.SpeechStub(channel).LongRunningRecognize(
                pb.LongRunningRecognizeRequest(config=pb.RecognitionConfig(encoding=pb.RecognitionConfig.AUTO),
                                               audio=pb.RecognitionAudio(content=audio)), timeout=60)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert spool_files(server) == files  # no new file, no temporary left behind
    after = httpx.get(f"{server.base_url}/v1/operations?pageSize=1000&extensions=true", timeout=10).json()["operations"]
    assert len(after) == len(before)


# ---------------------------------------------------------------- webhooks (must-show 4)


def _wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_webhook_is_delivered_once_per_job_with_a_valid_signature(server: ServerProcess) -> None:
    receiver = WebhookReceiver()
    try:
        audio = next(c for c in manifest() if c.id == SHORT).path.read_bytes()
        names = []
        for secret in ("s3cret-a", "s3cret-b"):
            body = {**lro_body(audio), "callback": {"url": receiver.url, "secret": secret}}
            names.append(submit(server, body)["name"])
        ops = [wait_done(server.base_url, n) for n in names]
        _wait_for(lambda: len(receiver.deliveries) >= 2)
        final = [wait_done(server.base_url, n) for n in names]
        _wait_for(lambda: all(httpx.get(f"{server.base_url}/v1/operations/{n}?extensions=true").json()["metadata"]["webhook"]["state"]
                              == "DELIVERED" for n in names))
        # delivered at the first attempt: no retry can follow a recorded delivery
        assert [httpx.get(f"{server.base_url}/v1/operations/{n}?extensions=true").json()["metadata"]["webhook"]["attempts"]
                for n in names] == [1, 1]
        assert len(receiver.deliveries) == 2
        by_name = {p["name"]: d for p, d in zip(receiver.payloads(), receiver.deliveries)}
        assert set(by_name) == set(names)
        for name, secret, op in zip(names, ("s3cret-a", "s3cret-b"), ops):
            delivery = by_name[name]
            assert verify(secret, delivery.body, delivery.headers["x-oasr-signature"])
            assert not verify("wrong", delivery.body, delivery.headers["x-oasr-signature"])
            payload = receiver.payloads()[receiver.deliveries.index(delivery)]
            assert payload["done"] is True and transcripts(payload) == transcripts(op)
            hook = httpx.get(f"{server.base_url}/v1/operations/{name}?extensions=true").json()["metadata"]["webhook"]
            assert hook["deliveryId"] == delivery.headers["x-oasr-delivery"]
            assert hook["attempts"] == 1 and "secret" not in str(hook)
        assert final
    finally:
        receiver.close()


def test_failing_receiver_gets_the_job_on_the_third_attempt(server: ServerProcess) -> None:
    receiver = WebhookReceiver(fail_first=2)
    try:
        audio = next(c for c in manifest() if c.id == SHORT).path.read_bytes()
        body = {**lro_body(audio), "callback": {"url": receiver.url, "secret": "k"}}
        name = submit(server, body)["name"]
        wait_done(server.base_url, name)
        _wait_for(lambda: httpx.get(f"{server.base_url}/v1/operations/{name}?extensions=true").json()["metadata"]["webhook"]["state"]
                  == "DELIVERED")
        hook = httpx.get(f"{server.base_url}/v1/operations/{name}?extensions=true").json()["metadata"]["webhook"]
        assert hook["attempts"] == 3 and hook["lastError"] == ""  # the last attempt succeeded
        assert [d.headers["x-oasr-delivery-attempt"] for d in receiver.deliveries] == ["1", "2", "3"]
        assert len({d.headers["x-oasr-delivery"] for d in receiver.deliveries}) == 1  # one delivery, retried
        assert all(verify("k", d.body, d.headers["x-oasr-signature"]) for d in receiver.deliveries)
    finally:
        receiver.close()


@pytest.mark.parametrize("url", ["http://example.com/hook", "http://localhost:9/hook", "ftp://127.0.0.1/x"])
def test_callback_outside_the_allow_list_is_refused_at_submission(server: ServerProcess, url: str) -> None:
    audio = next(c for c in manifest() if c.id == SHORT).path.read_bytes()
    r = httpx.post(f"{server.base_url}/v1/speech:longrunningrecognize?extensions=true",
                   json={**lro_body(audio), "callback": {"url": url, "secret": "k"}}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT", r.text


# ---------------------------------------------------------------- cancel, list, metrics


def test_cancel_a_queued_and_a_running_job(server: ServerProcess) -> None:
    long_audio = wav_bytes(np.concatenate([load_clip("jfk_inaugural")] * 4), fmt="FLAC")  # 44 s: two windows
    running = submit(server, lro_body(long_audio))["name"]
    queued = submit(server, lro_body(long_audio[: len(long_audio) // 2]))["name"]  # one runs at a time here
    _wait_for(lambda: httpx.get(f"{server.base_url}/v1/operations/{running}?extensions=true").json()["metadata"]["state"]
              == "RUNNING")
    assert httpx.get(f"{server.base_url}/v1/operations/{queued}?extensions=true").json()["metadata"]["state"] == "QUEUED"
    attempts_ended = metric_value(server, "oasr_job_duration_seconds_count")
    for name in (queued, running):
        r = httpx.post(f"{server.base_url}/v1/operations/{name}:cancel", timeout=10)
        assert r.status_code == 200 and r.json() == {}, r.text
        op = httpx.get(f"{server.base_url}/v1/operations/{name}?extensions=true").json()
        assert op["done"] and op["error"]["code"] == 1 and op["metadata"]["state"] == "CANCELLED"
        assert "response" not in op
    # once the running attempt has ended (the queued job never ran), it must not have overwritten the cancellation
    _wait_for(lambda: metric_value(server, "oasr_job_duration_seconds_count") >= attempts_ended + 1)
    assert httpx.get(f"{server.base_url}/v1/operations/{running}?extensions=true").json()["metadata"]["state"] == "CANCELLED"
    listed = httpx.get(f"{server.base_url}/v1/operations", params={"extensions": "true", "filter": "state=CANCELLED"}).json()
    assert {running, queued} <= {o["name"] for o in listed["operations"]}
    assert all(o["metadata"]["state"] == "CANCELLED" for o in listed["operations"])
    for name in (queued, running):
        assert httpx.delete(f"{server.base_url}/v1/operations/{name}?extensions=true").status_code == 200
        assert httpx.get(f"{server.base_url}/v1/operations/{name}?extensions=true").status_code == 404


def test_list_pages_through_every_operation_and_metrics_count_them(server: ServerProcess) -> None:
    everything = httpx.get(f"{server.base_url}/v1/operations", params={"extensions": "true", "pageSize": 1000}).json()["operations"]
    assert everything
    seen, token = [], ""
    while True:
        page = httpx.get(f"{server.base_url}/v1/operations", params={"extensions": "true", "pageSize": 2, "pageToken": token}).json()
        seen += [o["name"] for o in page["operations"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == [o["name"] for o in everything]
    assert httpx.get(f"{server.base_url}/v1/operations", params={"extensions": "true", "filter": "bogus"}).status_code == 400
    with grpc.insecure_channel(server.grpc_target) as channel:
        listed = operations_pb2_grpc.OperationsStub(channel).ListOperations(
            operations_pb2.ListOperationsRequest(filter="done=true", page_size=1000), timeout=10)
    assert {o.name for o in listed.operations} == {o["name"] for o in everything if o["done"]}
    metrics = httpx.get(f"{server.base_url}/metrics").text
    succeeded = sum(1 for o in everything if o["metadata"]["state"] == "SUCCEEDED")
    _wait_for(lambda: f'oasr_jobs{{state="SUCCEEDED"}} {float(succeeded)}' in httpx.get(
        f"{server.base_url}/metrics").text, timeout=15)
    assert 'oasr_webhook_deliveries_total{outcome="delivered"}' in metrics
    assert 'oasr_job_duration_seconds_count{outcome="succeeded"}' in metrics
    assert "oasr_jobs_queue_age_seconds" in metrics


# ---------------------------------------------------------------- the CLI


def test_cli_submit_wait_get_list_cancel(server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main

    clip = next(c for c in manifest() if c.id == SHORT)
    url = ["--url", server.base_url]
    assert main(["jobs", "submit", str(clip.path), *url]) == 0
    name = capsys.readouterr().out.strip()
    assert main(["jobs", "wait", name, "--interval", "0.2", *url]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == recognize_text(server.base_url, clip.path.read_bytes())[0]
    assert main(["jobs", "get", name, *url]) == 0
    assert '"state": "SUCCEEDED"' in capsys.readouterr().out
    assert main(["jobs", "list", "--filter", "state=SUCCEEDED", *url]) == 0
    assert any(line.startswith(name + "\tSUCCEEDED\t100%") for line in capsys.readouterr().out.splitlines())
    assert main(["jobs", "cancel", name, *url]) == 1
    assert "FAILED_PRECONDITION" in capsys.readouterr().err
    assert main(["jobs", "get", "nope", *url]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err
    audio, _, _ = stereo(LEFT, RIGHT)
    path = server.log_path.parent / "stereo.wav"
    path.write_bytes(audio)
    assert main(["jobs", "submit", str(path), "--separate-channels", "--wait", *url]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("]")[0] for line in lines] == ["[channel 1", "[channel 2"]
