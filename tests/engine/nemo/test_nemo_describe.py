"""`describe` (model_config.yaml only) reports what a loaded runner does, for every kind of NeMo
checkpoint the contract fixture (a hybrid's default head) does not cover."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.families import family_options
from engine.models.nemo import FAMILY
from engine.runner import ModelInfo
from tests.engine.nemo.conftest import FIXTURES, make_runner


def _described(name: str, **fields: Any) -> ModelInfo:
    fields.setdefault("service_mode", "streaming")
    config = EngineConfig(ckpt_dir=fields.pop("ckpt_dir", str(FIXTURES / name)), **fields)
    return FAMILY.describe(config, family_options(FAMILY, config.family_options))  # type: ignore[misc]


def _assert_as_loaded(described: ModelInfo, loaded: ModelInfo) -> None:
    assert described.parameters == 0 and loaded.parameters > 0
    assert described == ModelInfo(**{**vars(loaded), "parameters": 0}), "everything a NeMo runner reports is configuration"


@pytest.mark.parametrize(("name", "fields"), [
    ("ctc_striding_bn", {}),
    ("tdt", {}),
    ("unified_rc", {}),
    ("hybrid_cache_aware", {"decode_method": "ctc", "max_num_blocks": 40}),
])  # fmt: skip
def test_described_as_loaded(name: str, fields: dict[str, Any]) -> None:
    _assert_as_loaded(_described(name, **fields), make_runner(name, **fields).info())


def test_an_unpacked_checkpoint_is_described_from_its_own_config(tmp_path: Path) -> None:
    from engine.models.nemo.native import convert

    convert(str(FIXTURES / "tdt"), None, str(tmp_path))
    described = _described("", ckpt_dir=str(tmp_path))
    assert described == _described("tdt")  # the same name, sizes and settings as the .nemo it came from
