"""Several models with an idle TTL (OASR_MODEL_TTL_SECS), end to end: a model unused for the TTL
is unloaded, readiness stays up (the first model loads again on demand), and the next request
reloads it with the same transcript."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import ServerProcess
from tests.e2e.test_grpc import metric_value
from tests.e2e.test_models import NEMO, WHISPER, models, start_two_model_server, transcribe

TTL_S = 1.0
WAIT_S = 60.0  # the sweeper looks every quarter TTL; a shared CI box may be slow to get there


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_two_model_server(tmp_path_factory.mktemp("ttl"), OASR_MODEL_TTL_SECS=str(TTL_S))
    yield srv
    srv.terminate()


def wait_unloaded(server: ServerProcess, name: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while models(server)[name]["loaded"]:
        assert time.monotonic() < deadline, f"{name} still loaded after {WAIT_S} s"
        time.sleep(0.2)


def test_idle_models_unload_after_the_ttl_and_reload_on_use(server: ServerProcess) -> None:
    r = transcribe(server, NEMO)
    assert r.status_code == 200, r.text
    before = r.json()["text"]
    wait_unloaded(server, NEMO)
    wait_unloaded(server, WHISPER)
    assert metric_value(server, "oasr_model_unloads_total", model=NEMO, reason="idle_ttl") == 1.0
    ready = httpx.get(f"{server.base_url}/readyz", timeout=10)
    assert ready.status_code == 200  # the first model can serve: it loads on the next request
    assert {k: v["state"] for k, v in ready.json()["models"].items()} == {WHISPER: "unloaded", NEMO: "unloaded"}
    r = transcribe(server, NEMO)
    assert r.status_code == 200 and r.json()["text"] == before
    assert metric_value(server, "oasr_model_loads_total", model=NEMO) == 2.0
