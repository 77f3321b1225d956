"""Pieces of the job system that need no server: audio.uri confinement, the callback
allow-list, list filters, webhook signatures, request validation and the spool."""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

import pytest

from app.google.jobs import job_request
from app.jobs.callbacks import check_callback_url
from app.jobs.errors import InvalidJobError
from app.jobs.model import JobState
from app.jobs.spool import Spool, digest_of
from app.jobs.submit import prepare
from app.jobs.system import parse_filter
from app.jobs.uri import resolve_audio_uri
from app.jobs.webhooks import sign, verify
from app.settings import Settings
from engine.errors import InvalidRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "calls").mkdir(parents=True)
    (r / "calls" / "a.wav").write_bytes(b"RIFF")
    (tmp_path / "secret.wav").write_bytes(b"RIFF")
    os.symlink(tmp_path / "secret.wav", r / "out.wav")
    os.symlink(r / "calls" / "a.wav", r / "in.wav")
    return r


def test_uri_under_the_root_resolves(root: Path) -> None:
    assert resolve_audio_uri(f"file://{root}/calls/a.wav", str(root)) == (root / "calls" / "a.wav").resolve()
    assert resolve_audio_uri(f"file://{root}/in.wav", str(root)) == (root / "calls" / "a.wav").resolve()
    assert resolve_audio_uri(f"file://localhost{root}/calls/a.wav", str(root)).name == "a.wav"
    assert resolve_audio_uri(f"file://{root}/calls/%61.wav", str(root)).name == "a.wav"  # percent-decoded


@pytest.mark.parametrize("uri", [
    "file://{root}/../secret.wav", "file://{root}/calls/../../secret.wav", "file://{root}/out.wav",
    "file://{root}/calls", "file://{root}/nope.wav", "file://otherhost{root}/calls/a.wav", "file:calls/a.wav",
    "http://127.0.0.1/a.wav", "s3://bucket/a.wav", "{root}/calls/a.wav",
])
def test_uri_escapes_and_other_schemes_are_refused(root: Path, uri: str) -> None:
    with pytest.raises(InvalidJobError):
        resolve_audio_uri(uri.format(root=root), str(root))


def test_uri_needs_a_configured_root(root: Path) -> None:
    with pytest.raises(InvalidJobError, match="audio-uri-root"):
        resolve_audio_uri(f"file://{root}/calls/a.wav", None)


@pytest.mark.parametrize(("url", "allowed", "ok"), [
    ("https://hooks.example.com/x", ["hooks.example.com"], True),
    ("https://HOOKS.example.com:8443/x", ["hooks.example.com"], True),
    ("https://a.hooks.example.com/x", ["*.hooks.example.com"], True),
    ("https://hooks.example.com/x", ["*.hooks.example.com"], False),  # the wildcard is for subdomains
    ("https://evilhooks.example.com/x", ["*.hooks.example.com"], False),
    ("https://hooks.example.com.evil.net/x", ["hooks.example.com"], False),
    ("https://hooks.example.com/x", [], False),  # default: nothing allowed
    ("ftp://hooks.example.com/x", ["hooks.example.com"], False),
    ("https://user:pw@hooks.example.com/x", ["hooks.example.com"], False),
    ("http://[::1]:8080/x", ["::1"], True),
])
def test_callback_allow_list(url: str, allowed: list[str], ok: bool) -> None:
    if ok:
        assert check_callback_url(url, allowed) == url
    else:
        with pytest.raises(InvalidJobError):
            check_callback_url(url, allowed)


def test_filters() -> None:
    assert parse_filter("") is None
    assert parse_filter("state=RUNNING") == frozenset({JobState.RUNNING})
    assert parse_filter('state = "queued" OR state=RUNNING') == frozenset({JobState.QUEUED, JobState.RUNNING})
    assert parse_filter("done=true") == frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
    for bad in ("state=DONE", "name=x", "running"):
        with pytest.raises(InvalidJobError):
            parse_filter(bad)


def test_signature_is_hmac_sha256_of_the_body() -> None:
    body = b'{"name":"x","done":true}'
    expected = "sha256=" + hmac.new(b"k", body, hashlib.sha256).hexdigest()
    assert sign("k", body) == expected
    assert verify("k", body, expected) and not verify("k", body + b" ", expected)


def test_prepare_keeps_neither_audio_bytes_nor_the_secret_in_the_stored_request() -> None:
    settings = Settings(callback_allowed_hosts=["127.0.0.1"])
    request = pb.LongRunningRecognizeRequest(
        config=pb.RecognitionConfig(encoding=pb.RecognitionConfig.AUTO, request_id="r1"),
        audio=pb.RecognitionAudio(content=b"audio-bytes"),
        callback=pb.WebhookCallback(url="http://127.0.0.1:1/h", secret="s3cret"),
    )
    prepared = prepare(job_request(request), settings)
    assert prepared.audio == b"audio-bytes" and prepared.job.audio_digest == digest_of(b"audio-bytes")
    assert prepared.job.callback_secret == "s3cret"
    stored = pb.LongRunningRecognizeRequest.FromString(prepared.job.request)
    assert stored.config.request_id == "r1" and not stored.audio.content and not stored.callback.secret


@pytest.mark.parametrize("config", [
    pb.RecognitionConfig(encoding=pb.RecognitionConfig.LINEAR16),  # no sample rate
    pb.RecognitionConfig(encoding=pb.RecognitionConfig.AUTO, max_alternatives=-1),
    pb.RecognitionConfig(encoding=pb.RecognitionConfig.AUTO, decoding=pb.DecodingExtensions(beam_size=99)),
])
def test_a_bad_config_never_becomes_a_job_request(config: pb.RecognitionConfig) -> None:
    request = pb.LongRunningRecognizeRequest(config=config, audio=pb.RecognitionAudio(content=b"x"))
    with pytest.raises(InvalidRequestError):
        job_request(request)


def test_empty_audio_never_becomes_a_job_request() -> None:
    with pytest.raises(InvalidRequestError, match="empty"):
        job_request(pb.LongRunningRecognizeRequest(config=pb.RecognitionConfig()))


def test_prepare_refuses_a_model_not_served_before_storing() -> None:
    request = pb.LongRunningRecognizeRequest(config=pb.RecognitionConfig(model="other"),
                                             audio=pb.RecognitionAudio(content=b"x"))
    with pytest.raises(InvalidJobError, match="'other' does not exist"):
        prepare(job_request(request), Settings(served_model_name="tiny.en"))


def test_spool_places_atomically_and_cleans_leftovers(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    (tmp_path / "tmp" / "half-written").write_bytes(b"x")
    spool = Spool(tmp_path)  # a restart removes what a crash left between write and rename
    assert spool.temporary_files() == []
    d = digest_of(b"abc")
    spool.place(d, b"abc")
    spool.place(d, b"abc")
    assert spool.read(d) == b"abc" and spool.files() == [spool.path(d)]
    spool.remove(d)
    spool.remove(d)
    assert spool.files() == []
    with pytest.raises(ValueError):
        spool.path("../etc/passwd")
