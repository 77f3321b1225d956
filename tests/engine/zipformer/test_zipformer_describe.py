"""`describe` (model_args.json and the vocabulary only) reports what a loaded runner does: an
offline checkpoint, and an `epoch-N.pt` whose arguments are recorded inside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.families import family_options
from engine.models.zipformer import FAMILY
from engine.runner import ModelInfo
from tests.engine.zipformer.conftest import FIXTURES


def _assert_described_as_loaded(config: EngineConfig) -> None:
    opts = family_options(FAMILY, config.family_options)
    described = FAMILY.describe(config, opts)  # type: ignore[misc]
    loaded = FAMILY.build(config, opts).info()
    details = {k: v for k, v in loaded.details.items() if k != "state_bytes_per_stream"}  # the load's dtype
    assert described == ModelInfo(**{**vars(loaded), "parameters": 0, "details": details})


def test_an_offline_checkpoint_is_described_as_loaded() -> None:
    _assert_described_as_loaded(EngineConfig(ckpt_dir=str(FIXTURES / "tiny_offline"),
                                             family_options={"zipformer": {"language": "en", "max_streams": 3}}))


def test_an_epoch_checkpoint_without_model_args_is_described_from_its_recorded_arguments(tmp_path: Path) -> None:
    source = FIXTURES / "tiny_streaming"
    blob = torch.load(source / "pretrained.pt", map_location="cpu", weights_only=False)
    args = json.loads((source / "model_args.json").read_text())
    torch.save({**blob, **args, "lr": 0.045}, tmp_path / "epoch-7.pt")  # training keeps its knobs beside the model
    shutil.copy(source / "bpe.model", tmp_path / "bpe.model")
    _assert_described_as_loaded(EngineConfig(ckpt_dir=str(tmp_path), chunk_size=64, num_left_chunks=4))
