"""Several models under a memory budget that fits one (OASR_MODELS_MEMORY_BUDGET_MB), end to end:
using the second model unloads the first (least recently used, idle); a request to the first
then reloads it (unloading the second) and gives the very transcript it gave before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.model_pool import weight_bytes
from engine.config import embedded_checkpoint_dir
from tests.e2e.conftest import ServerProcess
from tests.e2e.test_grpc import metric_value
from tests.e2e.test_models import NEMO, NEMO_FIXTURE, WHISPER, models, start_two_model_server, transcribe

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    whisper, nemo = weight_bytes(embedded_checkpoint_dir()), NEMO_FIXTURE.stat().st_size
    budget_mb = (whisper + nemo / 2) / MIB  # either model fits alone, both together do not
    srv = start_two_model_server(tmp_path_factory.mktemp("budget"), OASR_MODELS_MEMORY_BUDGET_MB=f"{budget_mb:.3f}")
    yield srv
    srv.terminate()


def loaded(server: ServerProcess) -> dict[str, bool]:
    return {name: m["loaded"] for name, m in models(server).items()}


def text(server: ServerProcess, model: str) -> str:
    r = transcribe(server, model)
    assert r.status_code == 200, r.text
    return str(r.json()["text"])


@pytest.mark.slow
def test_lru_unload_under_a_budget_that_fits_one_model(server: ServerProcess) -> None:
    first = text(server, WHISPER)
    assert loaded(server) == {WHISPER: True, NEMO: False}

    nemo = text(server, NEMO)
    assert loaded(server) == {WHISPER: False, NEMO: True}
    assert metric_value(server, "oasr_model_unloads_total", model=WHISPER, reason="memory_budget") == 1.0
    assert metric_value(server, "oasr_model_loaded", model=WHISPER) == 0.0

    assert text(server, WHISPER) == first  # reloaded: the same model, the same transcript
    assert loaded(server) == {WHISPER: True, NEMO: False}
    assert metric_value(server, "oasr_model_loads_total", model=WHISPER) == 2.0
    assert metric_value(server, "oasr_model_unloads_total", model=NEMO, reason="memory_budget") == 1.0
    listed = models(server)
    assert listed[NEMO]["info"]["family"] == "nemo" and listed[NEMO]["size_mib"] > 0  # kept while unloaded
    assert text(server, NEMO) == nemo
