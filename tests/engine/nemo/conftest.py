"""Fixtures for the NeMo family: the committed checkpoints written by NeMo itself
(tests/fixtures/nemo, see its README), their NeMo references, and helpers that drive a runner.
torch runs single-threaded: the tiny models are dominated by per-op overhead."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.families import family_options
from engine.models.nemo import FAMILY
from engine.models.nemo.runner import NemoRunner
from engine.models.wenet.testing import drive_alone as _drive_alone
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput
from tests.conftest import load_clip
from tests.e2e.conftest import ServerProcess, start_server

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nemo"
NAMES = ("hybrid_cache_aware", "unified_rc", "ctc_striding_bn", "tdt")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@cache
def reference(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "reference.json").read_text())


@cache
def reference_arrays(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / name / "reference.npz") as data:
        return {k: data[k] for k in data.files}


def clip(name: str, clip_id: str) -> np.ndarray:
    """The dev clip the reference was recorded on, checked sample for sample."""
    audio = load_clip(clip_id)
    expected = reference(name)["clips"][clip_id]
    assert len(audio) == expected["samples"]
    assert hashlib.sha256(np.ascontiguousarray(audio).tobytes()).hexdigest() == expected["sha256"], (
        f"{clip_id} decodes differently here than when the reference was recorded"
    )
    return audio


def make_runner(name: str, **fields: Any) -> NemoRunner:
    fields.setdefault("service_mode", "streaming")
    fields.setdefault("ckpt_dir", str(FIXTURES / name))
    config = EngineConfig(**fields)
    return NemoRunner.from_config(config, family_options(FAMILY, config.family_options))


@pytest.fixture
def runner_factory() -> Callable[..., NemoRunner]:
    return make_runner


def drive_alone(
    runner: NemoRunner, audio: np.ndarray, piece_samples: int | None = None, request_id: str = "alone",
    decoding: DecodingOptions | None = None,
) -> list[RequestOutput]:  # fmt: skip
    """Stream `audio` as the only request, `piece_samples` per step: the runner-agnostic driver
    the WeNet family's tests use (it only calls admit/execute)."""
    return _drive_alone(runner, np.asarray(audio), piece_samples, request_id, decoding)  # type: ignore[arg-type]


def transcribe_offline(
    runner: NemoRunner, audio: np.ndarray, decoding: DecodingOptions | None = None
) -> RequestOutput:
    req = Request("offline", streaming=False, decoding=decoding or DecodingOptions(),
                  sample_rate=runner.sample_rate, audio=np.asarray(audio))  # fmt: skip
    assert runner.admit([req]) == []
    outputs = runner.execute()
    assert len(outputs) == 1 and outputs[0].finished
    return outputs[0]


def start_streaming_server(tmp: Path, name: str) -> ServerProcess:
    """A real streaming-mode server on the fixture checkpoint `name`."""
    return start_server(tmp, env={"OASR_CKPT_DIR": str(FIXTURES / name), "OASR_SERVICE_MODE": "streaming"})
