"""Fixtures for the Zipformer family: the tiny checkpoint written by icefall's own code and its
recorded outputs (tests/fixtures/zipformer, see its README), and helpers that drive a runner.
torch runs single-threaded: the tiny model is dominated by per-op overhead."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.families import family_options
from engine.models.wenet.testing import drive_alone as _drive_alone
from engine.models.zipformer import FAMILY
from engine.models.zipformer.runner import ZipformerRunner
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput
from tests.conftest import load_clip

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "zipformer"
CHECKPOINT = FIXTURES / "tiny_streaming"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@cache
def reference() -> dict[str, Any]:
    return json.loads((FIXTURES / "reference.json").read_text())


@cache
def reference_features() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "features.npz") as data:
        return {k: data[k] for k in data.files}


def clip(clip_id: str) -> np.ndarray:
    """The dev clip the reference was recorded on, checked sample for sample."""
    audio = load_clip(clip_id)
    expected = reference()["clips"][clip_id]
    assert len(audio) == expected["samples"]
    assert hashlib.sha256(np.ascontiguousarray(audio).tobytes()).hexdigest() == expected["sha256_float32"], (
        f"{clip_id} decodes differently here than when the reference was recorded"
    )
    return audio


def make_runner(**fields: Any) -> ZipformerRunner:
    fields.setdefault("service_mode", "streaming")
    fields.setdefault("ckpt_dir", str(CHECKPOINT))
    config = EngineConfig(**fields)
    return ZipformerRunner.from_config(config, family_options(FAMILY, config.family_options))


def drive_alone(runner: ZipformerRunner, audio: np.ndarray, piece_samples: int | None = None,
                request_id: str = "alone", decoding: DecodingOptions | None = None) -> list[RequestOutput]:  # fmt: skip
    return _drive_alone(runner, np.asarray(audio), piece_samples, request_id, decoding)  # type: ignore[arg-type]


def transcribe_offline(runner: ZipformerRunner, audio: np.ndarray, decoding: DecodingOptions | None = None) -> RequestOutput:
    req = Request("offline", streaming=False, decoding=decoding or DecodingOptions(), sample_rate=runner.sample_rate,
                  audio=np.asarray(audio))  # fmt: skip
    assert runner.admit([req]) == []
    outputs = runner.execute()
    assert len(outputs) == 1 and outputs[0].finished
    return outputs[0]
