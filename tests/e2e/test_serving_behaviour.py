"""How the server behaves as a service, end to end against real `uvicorn --factory app.main:create_app`
processes: probes and metrics, 32 concurrent requests batched together, a client that hangs
up mid-request, the limits and API keys of a configured server, and SIGTERM under load.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.audio_variants import encode_variant
from tests.conftest import Clip, load_clip, reference_clips, wer
from tests.e2e.conftest import ServerProcess, start_server

TIMEOUT_S = 300.0  # per client call: a shared 2-core box under load can take minutes; never unbounded
RECOGNIZE = "/v1/speech:recognize"
TRANSCRIBE = "/v1/audio/transcriptions"
LONG_CLIP = "libri_2412-153948-0000"  # 11.7 s, tiled into long recordings below
SHORT_CLIP = "libri_61-70968-0000"  # 4.9 s
HTTP_ONLY = {"OASR_GRPC_PORT": "0"}  # these tests are about HTTP; gRPC is tested on its own


# ----------------------------------------------------------------------------- helpers

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: ServerProcess, headers: dict[str, str] | None = None) -> Samples:
    r = httpx.get(server.base_url + "/metrics", headers=headers, timeout=10)
    r.raise_for_status()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def metric(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (the engine's own labels aside)."""
    wanted = frozenset(labels.items())
    return sum(value for (n, have), value in samples.items() if n == name and wanted <= have)


def readiness(server: ServerProcess) -> dict[str, object]:
    body: dict[str, object] = httpx.get(server.base_url + "/readyz", timeout=10).json()
    return body


def wait_until(predicate: object, timeout: float, what: str) -> float:
    """Poll `predicate()` (a cheap probe read) until true; return the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def long_linear16(seconds: float) -> bytes:
    """Real speech tiled to `seconds`, as LINEAR16 at 16 kHz (decodes instantly, runs long)."""
    clip = load_clip(LONG_CLIP)
    samples = np.tile(clip, int(np.ceil(seconds * 16000 / len(clip))))[: int(seconds * 16000)]
    return encode_variant(samples, 16000, "linear16")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("behaviour"), env=HTTP_ONLY)
    yield srv
    srv.terminate()


# ----------------------------------------------------------------------- probes, metrics


def test_probes_models_and_metrics_shapes(server: ServerProcess) -> None:
    assert httpx.get(server.base_url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(server.base_url + "/readyz")
    assert ready.status_code == 200 and ready.headers["content-type"] == "application/json"
    body = ready.json()
    assert body["ready"] is True and body["draining"] is False
    assert body["steps"] >= 1 and 0 <= body["heartbeat_age_s"] <= 5.0
    assert body["consecutive_step_failures"] == 0


def test_the_readiness_fields_docs_api_md_lists_are_in_the_body(server: ServerProcess) -> None:
    """docs/api.md's /readyz row names the body's fields; each one is read back from the server."""
    import re

    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `GET /readyz`"))
    documented = re.findall(r"`(\w+)`", row.split("the body says why", 1)[1].split(";")[0])
    assert {"ready", "consecutive_step_failures", "heartbeat_age_s"} <= set(documented), documented
    body = httpx.get(server.base_url + "/readyz").json()
    assert [name for name in documented if name not in body] == []

    models = httpx.get(server.base_url + "/v1/models").json()
    assert models["object"] == "list"
    (model,) = models["data"]
    assert model["object"] == "model" and model["owned_by"] == "oasr" and isinstance(model["created"], int)
    assert model["id"] == model["info"]["model"]  # no served name configured: the engine's own
    info = model["info"]
    assert info["family"] == "whisper" and info["sample_rate"] == 16000 and "en" in info["languages"]

    m = httpx.get(server.base_url + "/metrics")
    assert m.status_code == 200
    assert m.headers["content-type"].startswith("text/plain; version=")
    samples = scrape(server)
    assert any(name == "oasr_build_info" and value == 1 for (name, _), value in samples.items())


def test_http_metrics_label_route_patterns_not_raw_paths(server: ServerProcess) -> None:
    base = server.base_url
    httpx.get(base + "/v1/models")
    httpx.get(base + "/no/such/path/a1b2c3")
    httpx.post(base + RECOGNIZE, params={"encoding": "FOO"}, content=b"x")
    samples = scrape(server)
    routes = {dict(labels)["route"] for (name, labels) in samples if name == "oasr_http_requests_total"}
    assert "/v1/models" in routes and RECOGNIZE in routes and "<unmatched>" in routes
    assert not any("a1b2c3" in r for r in routes), routes
    assert metric(samples, "oasr_http_requests_total", method="POST", route=RECOGNIZE, status="400") >= 1
    assert metric(samples, "oasr_http_requests_total", method="GET", route="<unmatched>", status="404") >= 1


# ---------------------------------------------------------------------------- load


def _load_clips() -> list[Clip]:
    short = [c for c in reference_clips() if c.duration <= 12.0]
    return [short[i % len(short)] for i in range(32)]


@pytest.mark.slow
def test_32_concurrent_requests_all_succeed_in_batches(server: ServerProcess) -> None:
    clips = _load_clips()
    before = scrape(server)

    async def one(client: httpx.AsyncClient, i: int, clip: Clip) -> str:
        data = clip.path.read_bytes()
        if i % 2:  # half OpenAI multipart, half Google raw body: both surfaces share the batches
            r = await client.post(TRANSCRIBE, files={"file": (clip.path.name, data)}, data={"model": "whisper-1"})
            assert r.status_code == 200, r.text
            return str(r.json()["text"])
        r = await client.post(RECOGNIZE, content=data, params={"encoding": "AUTO"})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        return str(results[0]["alternatives"][0]["transcript"]) if results else ""

    probes: list[int] = []

    async def run() -> list[str]:
        async with (
            httpx.AsyncClient(base_url=server.base_url, timeout=TIMEOUT_S,
                              limits=httpx.Limits(max_connections=32)) as client,
            httpx.AsyncClient(base_url=server.base_url, timeout=TIMEOUT_S) as prober,
        ):
            work = asyncio.gather(*(one(client, i, c) for i, c in enumerate(clips)))
            while not work.done():  # a kubelet's view while the engine is at its busiest
                probes.append((await prober.get("/readyz")).status_code)
                await asyncio.wait([work], timeout=0.5)
            return await work

    texts = asyncio.run(run())
    assert probes and set(probes) == {200}, probes  # busy is not unready
    score = wer([c.text or "" for c in clips], texts)
    assert score <= 25.0, list(zip([c.id for c in clips], texts))

    after = scrape(server)
    assert metric(after, "oasr_requests_admitted_total") - metric(before, "oasr_requests_admitted_total") == 32
    batches = metric(after, "oasr_engine_batch_size_count") - metric(before, "oasr_engine_batch_size_count")
    singles = (metric(after, "oasr_engine_batch_size_bucket", le="1.0")
               - metric(before, "oasr_engine_batch_size_bucket", le="1.0"))
    admitted = metric(after, "oasr_engine_batch_size_sum") - metric(before, "oasr_engine_batch_size_sum")
    assert admitted == 32
    assert batches - singles >= 1, f"{batches} admissions, {singles} of them single: no batching"
    assert batches < 32


# ------------------------------------------------------------------------- disconnects


def _raw_post(server: ServerProcess, request: httpx.Request) -> socket.socket:
    """Send a complete HTTP/1.1 request on a plain socket and leave the response unread."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    body = request.read()
    target = request.url.raw_path.decode()
    head = f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() != "host")
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def _engine_busy(server: ServerProcess) -> bool:
    r = readiness(server)
    return int(r["running"]) + int(r["waiting"]) >= 1  # type: ignore[call-overload]


def _engine_idle(server: ServerProcess) -> bool:
    r = readiness(server)
    return r["running"] == 0 and r["waiting"] == 0 and r["inflight"] == 0


AUDIO_FOR_DISCONNECT_S = 300.0  # ten Whisper windows, decoded one after another
MAX_STEPS_AFTER_HANGUP = 5  # engine steps between the hang-up and the engine letting go


@pytest.mark.parametrize("api", ["google", "openai"])
def test_client_disconnect_mid_request_aborts_engine_request(server: ServerProcess, api: str) -> None:
    wait_until(lambda: _engine_idle(server), 60, "an idle engine")
    before = scrape(server)
    body = long_linear16(AUDIO_FOR_DISCONNECT_S)
    if api == "google":
        request = httpx.Request("POST", server.base_url + RECOGNIZE, content=body,
                                params={"encoding": "LINEAR16", "sample_rate": 16000})
    else:
        wav = encode_variant(np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768, 16000, "wav")
        request = httpx.Request("POST", server.base_url + TRANSCRIBE, files={"file": ("long.wav", wav)})
    sock = _raw_post(server, request)
    try:
        wait_until(lambda: _engine_busy(server), 60, "the engine to take the long request")
    finally:
        sock.close()  # hang up while the engine works on it
    steps_at_hangup = int(readiness(server)["steps"])  # type: ignore[call-overload]
    gone_after = wait_until(lambda: _engine_idle(server), 60, "the engine request to be aborted")
    steps_after = int(readiness(server)["steps"]) - steps_at_hangup  # type: ignore[call-overload]
    after = scrape(server)
    assert metric(after, "oasr_requests_cancelled_total") - metric(before, "oasr_requests_cancelled_total") == 1
    cancelled = ("oasr_request_duration_seconds_count", {"api": api, "mode": "offline", "outcome": "cancelled"})
    ok = ("oasr_request_duration_seconds_count", {"api": api, "mode": "offline", "outcome": "ok"})
    assert metric(after, cancelled[0], **cancelled[1]) - metric(before, cancelled[0], **cancelled[1]) == 1
    assert metric(after, ok[0], **ok[1]) == metric(before, ok[0], **ok[1])  # it never finished
    assert metric(after, "oasr_requests_failed_total", stage="unknown") == 0  # a hang-up is not an error
    # Ten windows of speech take hundreds of decoder steps; the abort lands at the next step
    # boundary, so the engine lets go within a few steps (and seconds) of the hang-up.
    assert steps_after <= MAX_STEPS_AFTER_HANGUP, (steps_after, gone_after)


def test_sse_client_disconnect_aborts_engine_request(server: ServerProcess) -> None:
    wait_until(lambda: _engine_idle(server), 60, "an idle engine")
    before = scrape(server)
    body = long_linear16(AUDIO_FOR_DISCONNECT_S)
    wav = encode_variant(np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768, 16000, "wav")
    with (
        httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as client,
        client.stream("POST", TRANSCRIBE, files={"file": ("long.wav", wav)}, data={"stream": "true"}) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        wait_until(lambda: _engine_busy(server), 60, "the engine to take the streamed request")
        steps_at_hangup = int(readiness(server)["steps"])  # type: ignore[call-overload]
    # leaving the block closed the connection before any event arrived
    gone_after = wait_until(lambda: _engine_idle(server), 60, "the streamed engine request to be aborted")
    steps_after = int(readiness(server)["steps"]) - steps_at_hangup  # type: ignore[call-overload]
    after = scrape(server)
    assert metric(after, "oasr_requests_cancelled_total") - metric(before, "oasr_requests_cancelled_total") == 1
    assert steps_after <= MAX_STEPS_AFTER_HANGUP, (steps_after, gone_after)


def test_still_serving_after_disconnects(server: ServerProcess) -> None:
    clip = next(c for c in reference_clips() if c.id == SHORT_CLIP)
    r = httpx.post(server.base_url + TRANSCRIBE, files={"file": (clip.path.name, clip.path.read_bytes())},
                   timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert wer([clip.text or ""], [r.json()["text"]]) <= 15.0


# ------------------------------------------------------------------ a configured server

API_KEYS = ("k-one", "k-two")
SERVED_NAME = "oasr-tiny"
MAX_AUDIO_MIB = 0.5
MAX_AUDIO_SECONDS = 8.0


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("limited"), env={
        **HTTP_ONLY,
        "OASR_API_KEY": ",".join(API_KEYS),
        "OASR_SERVED_MODEL_NAME": SERVED_NAME,
        "OASR_MAX_AUDIO_MIB": str(MAX_AUDIO_MIB),
        "OASR_MAX_AUDIO_SECONDS": str(MAX_AUDIO_SECONDS),
    })
    yield srv
    srv.terminate()


KEY = {"Authorization": f"Bearer {API_KEYS[1]}"}


def test_api_key_required_except_on_probes(limited: ServerProcess) -> None:
    base = limited.base_url
    assert httpx.get(base + "/healthz").status_code == 200
    assert httpx.get(base + "/readyz").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "k-on"}, {"Authorization": "k-one"}):
        r = httpx.get(base + "/v1/models", headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        error = r.json()["error"]
        assert error["type"] == "authentication_error" and "API key" in error["message"]
    r = httpx.post(base + RECOGNIZE, params={"encoding": "WAV"}, content=b"x")
    assert r.status_code == 401
    assert r.json()["error"]["status"] == "UNAUTHENTICATED"  # the Google envelope on the Google route
    assert httpx.get(base + "/metrics").status_code == 401
    assert httpx.get(base + "/v1/models", headers=KEY).status_code == 200
    assert httpx.get(base + "/v1/models", headers={"x-api-key": API_KEYS[0]}).status_code == 200
    assert httpx.get(base + "/metrics", headers=KEY).status_code == 200


def test_served_model_name(limited: ServerProcess) -> None:
    sdk = openai.OpenAI(base_url=limited.base_url + "/v1", api_key=API_KEYS[0], max_retries=0, timeout=TIMEOUT_S)
    assert [m.id for m in sdk.models.list()] == [SERVED_NAME]
    clip = next(c for c in reference_clips() if c.id == SHORT_CLIP)
    with clip.path.open("rb") as f, pytest.raises(openai.NotFoundError) as err:
        sdk.audio.transcriptions.create(model="large-v9", file=f)
    assert err.value.code == "model_not_found"
    assert "large-v9" in err.value.message and SERVED_NAME in err.value.message
    for name in (SERVED_NAME, "whisper-1"):  # OpenAI's own names mean the served model
        with clip.path.open("rb") as f:
            out = sdk.audio.transcriptions.create(model=name, file=f)
        assert wer([clip.text or ""], [out.text]) <= 15.0


def test_oversize_body_is_413_on_both_surfaces(limited: ServerProcess) -> None:
    body = bytes(int(MAX_AUDIO_MIB * 1024 * 1024) + 4096)
    r = httpx.post(limited.base_url + TRANSCRIBE, files={"file": ("big.wav", body)}, headers=KEY, timeout=TIMEOUT_S)
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["code"] == "body_too_large" and "0.5 MiB" in error["message"] and "--max-audio-mib" in error["message"]
    r = httpx.post(limited.base_url + RECOGNIZE, params={"encoding": "LINEAR16", "sample_rate": 16000}, content=body,
                   headers=KEY, timeout=TIMEOUT_S)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == 413 and "--max-audio-mib" in r.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while streaming
        for _ in range(len(body) // 65536 + 1):
            yield bytes(65536)

    try:
        r = httpx.post(limited.base_url + RECOGNIZE, params={"encoding": "LINEAR16", "sample_rate": 16000},
                       content=chunks(), headers=KEY, timeout=TIMEOUT_S)
    except httpx.TransportError:
        pass  # the server may close the connection before the client finished sending; that is fine too
    else:
        assert r.status_code == 413, r.text


def test_overlong_audio_is_413(limited: ServerProcess) -> None:
    body = long_linear16(MAX_AUDIO_SECONDS + 2.0)  # 10 s = 0.31 MiB: under the body limit
    r = httpx.post(limited.base_url + RECOGNIZE, params={"encoding": "LINEAR16", "sample_rate": 16000},
                   content=body, headers=KEY, timeout=TIMEOUT_S)
    assert r.status_code == 413, r.text
    message = r.json()["error"]["message"]
    assert "8 s" in message or "8.0 s" in message or "8s" in message, message
    mp3 = encode_variant(np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768, 16000, "mp3")
    r = httpx.post(limited.base_url + TRANSCRIBE, files={"file": ("long.mp3", mp3)}, headers=KEY, timeout=TIMEOUT_S)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["param"] == "file"


def test_limited_server_still_serving(limited: ServerProcess) -> None:
    clip = next(c for c in reference_clips() if c.id == SHORT_CLIP)
    r = httpx.post(limited.base_url + RECOGNIZE, params={"encoding": "AUTO"}, content=clip.path.read_bytes(),
                   headers=KEY, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert wer([clip.text or ""], [r.json()["results"][0]["alternatives"][0]["transcript"]]) <= 15.0


# ------------------------------------------------------------------------------ SIGTERM

GRACE_S = 3.0
LONG_REQUEST_S = 600.0  # twenty windows cannot finish within the grace: these must come back 503


def test_sigterm_under_load_completes_or_503s_and_exits_0(tmp_path: Path) -> None:
    # the drain stops the gRPC listener too
    srv = start_server(tmp_path, env={"OASR_SHUTDOWN_GRACE_SECS": str(GRACE_S)})
    try:
        short = [c for c in reference_clips() if c.duration <= 5.0][:7]
        long_body = long_linear16(LONG_REQUEST_S)
        answered: list[str] = []

        async def post(client: httpx.AsyncClient, kind: str, i: int) -> tuple[str, object]:
            try:
                if kind == "long":
                    r = await client.post(RECOGNIZE, content=long_body,
                                          params={"encoding": "LINEAR16", "sample_rate": 16000})
                else:
                    clip = short[i % len(short)]
                    r = await client.post(TRANSCRIBE, files={"file": (clip.path.name, clip.path.read_bytes())})
            except httpx.ConnectError as exc:
                return kind, exc
            except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
                # a late request's connection, accepted into the listener's backlog (or idle in the
                # client's pool) and closed unanswered as the server stops listening: the same
                # refusal as a ConnectError, one step later; an in-flight request may not see it
                if kind != "late":
                    raise
                return kind, exc
            answered.append(kind)
            return kind, r

        def all_in_flight() -> bool:  # every first request is in a handler (or already answered)
            r = readiness(srv)
            return int(r["inflight"]) + len(answered) >= 10 and _engine_busy(srv)  # type: ignore[call-overload]

        async def run() -> tuple[list[tuple[str, object]], list[tuple[str, object]]]:
            async with httpx.AsyncClient(base_url=srv.base_url, timeout=TIMEOUT_S) as client:
                first = [asyncio.ensure_future(post(client, "long", i)) for i in range(3)]
                first += [asyncio.ensure_future(post(client, "short", i)) for i in range(7)]
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, wait_until, all_in_flight, 60, "all requests in flight")
                srv.proc.send_signal(signal.SIGTERM)
                late = []
                for i in range(3):  # arriving while draining: 503, or refused once the listener closed
                    await asyncio.sleep(0.3)
                    late.append(asyncio.ensure_future(post(client, "late", i)))
                # every call returns: the test fails here rather than hang if one does not
                done_first = await asyncio.wait_for(asyncio.gather(*first), timeout=GRACE_S + 60)
                done_late = await asyncio.wait_for(asyncio.gather(*late), timeout=GRACE_S + 60)
                return done_first, done_late

        first, late = asyncio.run(run())
        exit_code = srv.proc.wait(timeout=60)
    finally:
        srv.terminate()
    log = srv.log()
    statuses = [(kind, r.status_code if isinstance(r, httpx.Response) else type(r).__name__) for kind, r in first]
    assert all(isinstance(r, httpx.Response) for _, r in first), statuses  # in flight: never refused
    for kind, r in first:
        assert isinstance(r, httpx.Response)
        if kind == "long":
            assert r.status_code == 503, r.text
            error = r.json()["error"]
            assert error["status"] == "UNAVAILABLE" and "shutting down" in error["message"]
        else:
            assert r.status_code in (200, 503), r.text
    for _, r in late:
        if isinstance(r, httpx.Response):
            assert r.status_code == 503, r.text
            assert "shutting down" in r.json()["error"]["message"]
        else:
            assert isinstance(r, (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)), r
    assert exit_code == 0, log[-3000:]
    assert "draining" in log and "engine stopped" in log, log[-3000:]
