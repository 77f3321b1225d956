"""Fixtures for the WeNet family: generated checkpoints in the real on-disk format and runners
over them. torch runs single-threaded here: the tiny models are dominated by per-op overhead,
which extra threads on a shared 2-core machine only make worse."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.config import EngineConfig
from engine.families import family_options
from engine.models.wenet import FAMILY
from engine.models.wenet.runner import WenetRunner
from engine.models.wenet.testing import CheckpointSpec, write_checkpoint


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def wenet_ckpt(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 2-layer d=64 Conformer-CTC checkpoint (JSON CMVN file, pe table, decoder keys)."""
    path = tmp_path_factory.mktemp("wenet") / "tiny"
    return write_checkpoint(str(path), CheckpointSpec(with_decoder=True))


@pytest.fixture
def make_runner(wenet_ckpt: str) -> Callable[..., WenetRunner]:
    def make(**overrides: Any) -> WenetRunner:
        fields: dict[str, Any] = {"ckpt_dir": wenet_ckpt, "service_mode": "streaming", "max_num_blocks": 512}
        fields.update(overrides)
        config = EngineConfig(**fields)
        aliased = config.family_knob_aliases().get("wenet")  # deprecated EngineConfig names, as the engine reads them
        return WenetRunner.from_config(config, family_options(FAMILY, config.family_options, aliased))

    return make


def new_ckpt(tmp_path: Path, **spec: Any) -> str:
    return write_checkpoint(str(tmp_path / "ckpt"), CheckpointSpec(**spec))
