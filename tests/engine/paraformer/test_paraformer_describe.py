"""`describe` (config.yaml and the token list only) picks the runner the family's build picks and
reports what it does: offline, SeACo (keywords) and paraformer-online with non-default options."""

from __future__ import annotations

from typing import Any

import pytest

from engine.config import EngineConfig
from engine.families import family_options
from engine.models.paraformer import FAMILY
from engine.runner import ModelInfo
from tests.engine.paraformer.conftest import FIXTURES


@pytest.mark.parametrize(("name", "options"), [
    ("tiny", {"languages": ("zh", "en"), "max_segment_seconds": 20.0}),
    ("seaco", {}),
    ("online", {"chunk_size": (0, 8, 4), "max_streams": 7}),
])  # fmt: skip
def test_described_as_loaded(name: str, options: dict[str, Any]) -> None:
    config = EngineConfig(ckpt_dir=str(FIXTURES / name), family_options={"paraformer": options})
    opts = family_options(FAMILY, config.family_options)
    described = FAMILY.describe(config, opts)  # type: ignore[misc]
    loaded = FAMILY.build(config, opts).info()
    assert described.parameters == 0 and loaded.parameters > 0
    assert described == ModelInfo(**{**vars(loaded), "parameters": 0}), "everything a Paraformer runner reports is configuration"
    assert described.supports_streaming is (name == "online") and described.capabilities.keywords is (name == "seaco")
