"""`describe` (train.yaml, units.txt and the state dict's key names only) reports what a loaded
runner does: attention rescoring offered exactly when the weights hold a decoder, the configured
decode method, and the key names read from either torch file format without reading tensors (zip format)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.cache.block_pool import POOL_DETAILS
from engine.config import EngineConfig
from engine.families import family_options
from engine.models.wenet import FAMILY
from engine.models.wenet.checkpoint import state_dict_keys
from engine.models.wenet.runner import WenetRunner
from engine.models.wenet.testing import write_checkpoint
from engine.runner import ModelInfo


def _described(ckpt_dir: str, **fields: Any) -> ModelInfo:
    config = EngineConfig(ckpt_dir=ckpt_dir, service_mode="streaming", max_num_blocks=512, **fields)
    return FAMILY.describe(config, family_options(FAMILY, config.family_options))  # type: ignore[misc]


def _assert_as_loaded(described: ModelInfo, loaded: ModelInfo) -> None:
    details = {k: v for k, v in loaded.details.items() if k not in POOL_DETAILS}  # planned at load
    assert described == ModelInfo(**{**vars(loaded), "parameters": 0, "details": details})


@pytest.mark.parametrize("decode_method", [None, "ctc"])
def test_a_checkpoint_with_a_decoder_offers_rescoring(wenet_ckpt: str, make_runner: Callable[..., WenetRunner],
                                                      decode_method: str | None) -> None:  # fmt: skip
    described = _described(wenet_ckpt, decode_method=decode_method, chunk_size=8, block_size_frames=4)
    assert described.decode_methods == ("ctc", "attention_rescoring")
    loaded = make_runner(decode_method=decode_method, chunk_size=8, block_size_frames=4).info()
    _assert_as_loaded(described, loaded)


def test_a_checkpoint_without_decoder_weights_offers_ctc_only(tmp_path: Path) -> None:
    ckpt = write_checkpoint(str(tmp_path / "plain"))  # train.yaml still names a bitransformer decoder
    described = _described(ckpt)
    assert described.decode_methods == ("ctc",) and described.decode_method == "ctc"


def test_state_dict_keys_are_read_from_either_format_without_tensors(wenet_ckpt: str, tmp_path: Path) -> None:
    sd = torch.load(os.path.join(wenet_ckpt, "final.pt"), map_location="cpu", weights_only=True)
    wrapped = {"model": {f"module.{k}": v for k, v in sd.items()}, "epoch": 3}
    torch.save(wrapped, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    torch.save(wrapped, tmp_path / "zip.pt")
    assert state_dict_keys(str(tmp_path / "legacy.pt")) == state_dict_keys(str(tmp_path / "zip.pt")) == list(sd)
