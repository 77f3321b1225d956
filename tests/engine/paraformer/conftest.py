"""Fixtures for the Paraformer family: the checkpoint FunASR wrote (tests/fixtures/paraformer,
see its README), FunASR's recorded outputs, and helpers that run the runner in process.
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
from engine.models.paraformer import FAMILY
from engine.models.paraformer.runner import ParaformerRunner
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput
from tests.conftest import load_clip

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "paraformer"
CKPT = FIXTURES / "tiny"
SEACO_CKPT = FIXTURES / "seaco"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@cache
def reference() -> dict[str, Any]:
    return json.loads((FIXTURES / "reference.json").read_text())


def clip(clip_id: str) -> np.ndarray:
    """The dev clip FunASR was run on, checked sample for sample."""
    audio = load_clip(clip_id)
    expected = reference()["clips"][clip_id]
    assert len(audio) == expected["samples"]
    assert hashlib.sha256(np.ascontiguousarray(audio).tobytes()).hexdigest() == expected["sha256"], (
        f"{clip_id} decodes differently here than when the reference was recorded"
    )
    return audio


def make_runner(**fields: Any) -> ParaformerRunner:
    fields.setdefault("ckpt_dir", str(CKPT))
    config = EngineConfig(**fields)
    return ParaformerRunner.from_config(config, family_options(FAMILY, config.family_options))


@pytest.fixture(scope="module")
def runner() -> ParaformerRunner:
    return make_runner()


@pytest.fixture(scope="module")
def seaco_runner() -> ParaformerRunner:
    return make_runner(ckpt_dir=str(SEACO_CKPT))


def recognize(runner: ParaformerRunner, audios: list[np.ndarray],
              decoding: DecodingOptions | None = None) -> list[RequestOutput]:  # fmt: skip
    """All `audios` admitted together and run in one `execute()`; outputs in input order."""
    return recognize_each(runner, audios, [decoding or DecodingOptions()] * len(audios))


def recognize_each(runner: ParaformerRunner, audios: list[np.ndarray],
                   options: list[DecodingOptions]) -> list[RequestOutput]:  # fmt: skip
    """Like `recognize`, each request with its own options."""
    reqs = [Request(f"r{i}", streaming=False, decoding=o, sample_rate=runner.sample_rate, audio=np.asarray(a))
            for i, (a, o) in enumerate(zip(audios, options, strict=True))]  # fmt: skip
    assert runner.admit(reqs) == []
    outputs = {o.request_id: o for o in runner.execute()}
    assert not runner.has_work()
    return [outputs[r.request_id] for r in reqs]
