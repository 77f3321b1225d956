"""WeNet parity on a checkpoint WeNet itself wrote (tests/fixtures/wenet, tools/wenet_fixtures.py:
its aishell U2++ recipe at tiny sizes through its own init_model, save_checkpoint and
ASRModel.decode): from the waveform, our tokens equal WeNet's ctc_greedy_search and, with a beam,
its attention_rescoring, at a 16-frame decoding chunk with full left context."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine import ASREngine, EngineConfig
from engine.models.wenet.checkpoint import load_checkpoint
from engine.types import DecodingOptions
from tests.conftest import load_clip

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "wenet"
CKPT = FIXTURES / "u2pp"


@cache
def reference() -> dict[str, Any]:
    return json.loads((FIXTURES / "reference.json").read_text())


CLIPS = tuple(reference()["clips"])


@pytest.fixture(scope="module")
def engine() -> Iterator[ASREngine]:
    eng = ASREngine(EngineConfig(ckpt_dir=str(CKPT), chunk_size=reference()["chunk"], num_left_chunks=-1,
                                 quantization="none"))
    yield eng
    eng.shutdown()


def test_the_clips_are_the_ones_wenet_decoded() -> None:
    import hashlib

    for clip_id, row in reference()["clips"].items():
        audio = np.ascontiguousarray(load_clip(clip_id), dtype=np.float32)
        assert len(audio) == row["samples"] and hashlib.sha256(audio.tobytes()).hexdigest() == row["sha256_float32"]


def test_features_match_wenet_s_within_float_rounding() -> None:
    from engine.ops.fbank import KaldiFbank

    ckpt = load_checkpoint(str(CKPT), torch.device("cpu"), torch.float32)
    feats = np.load(FIXTURES / "features.npz")
    for clip_id in CLIPS:
        ours = KaldiFbank(ckpt.fbank)([torch.from_numpy(load_clip(clip_id) * 32768.0)])[0]
        ref = torch.from_numpy(feats[clip_id])
        assert ours.shape == ref.shape
        assert float((ours - ref).abs().max()) < 2e-2  # log energies of near-silent bins; speech bins far closer


def test_greedy_tokens_equal_wenet_s_ctc_greedy_search(engine: ASREngine) -> None:
    outs = engine.transcribe_outputs([load_clip(c) for c in CLIPS])
    for clip_id, out in zip(CLIPS, outs, strict=True):
        want = reference()["clips"][clip_id]["ctc_greedy_search"]
        assert want and out.tokens == want, clip_id


def test_beam_tokens_equal_wenet_s_attention_rescoring(engine: ASREngine) -> None:
    beam = reference()["beam"]
    outs = engine.transcribe_outputs([load_clip(c) for c in CLIPS], decoding=DecodingOptions(beam_size=beam))
    rescored = 0
    for clip_id, out in zip(CLIPS, outs, strict=True):
        row = reference()["clips"][clip_id]
        assert out.tokens == row["attention_rescoring"], clip_id
        rescored += row["attention_rescoring"] != row["ctc_prefix_beam_search"]
    assert rescored, "the fixture must have rescoring change a result"


def test_streamed_greedy_tokens_equal_wenet_s_ctc_greedy_search(engine: ASREngine) -> None:
    """Chunk by chunk through the paged KV cache: WeNet's chunk-masked decode is what its runtime
    streams, so the tokens are the same."""
    outs = engine.transcribe_outputs([load_clip(c) for c in CLIPS], streaming=True)
    for clip_id, out in zip(CLIPS, outs, strict=True):
        assert out.tokens == reference()["clips"][clip_id]["ctc_greedy_search"], clip_id
