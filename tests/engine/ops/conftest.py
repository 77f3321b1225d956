"""The compiled operators must be there wherever they can be built: a missing or broken
engine._C fails these tests (skips only where no C++ compiler exists, or when the extension is
switched off on purpose)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
import torch

from engine.ops.extension import DISABLE_ENV, disabled_by_env, extension_status


def require_extension() -> None:
    status = extension_status()
    if status.loaded:
        return
    if disabled_by_env():
        pytest.skip(f"{DISABLE_ENV}=1: the compiled operators are switched off")
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        pytest.skip("no C++ compiler on this machine: engine._C cannot be built here")
    pytest.fail(f"engine._C is not loaded: {status.detail}")


@pytest.fixture
def ext() -> None:
    require_extension()


def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One thread by default: the small ops of these tiny inputs only pay for waking a pool (on a
    loaded shared machine, milliseconds per op)."""
    yield from _threads(1)


@pytest.fixture
def two_threads(_one_thread: None) -> Iterator[None]:
    """Two OpenMP threads: a kernel's batch loop really runs split across threads."""
    yield from _threads(2)


@pytest.fixture(scope="session")
def wenet_log_probs(tmp_path_factory: pytest.TempPathFactory) -> torch.Tensor:
    """(T, V) CTC log-probs of the tiny generated WeNet model on a real 4.9 s clip."""
    from engine.config import EngineConfig
    from engine.models.wenet.runner import AUDIO_SCALE, WenetRunner
    from engine.models.wenet.testing import CheckpointSpec, write_checkpoint
    from tests.conftest import load_clip

    ckpt = write_checkpoint(str(tmp_path_factory.mktemp("wenet") / "tiny"), CheckpointSpec())
    runner = WenetRunner.from_config(EngineConfig(ckpt_dir=ckpt, service_mode="streaming", max_num_blocks=64))
    feats = runner.fbank([torch.tensor(load_clip("libri_61-70968-0000")) * AUDIO_SCALE])[0]
    log_probs, _ = runner.model.forward_full(feats[None], torch.tensor([len(feats)]), 16, -1)
    return log_probs[0].float()


@pytest.fixture
def cuda_ext() -> None:
    """A GPU and the CUDA kernels; skips cleanly without either."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    require_extension()
    if not extension_status().cuda:
        pytest.skip(f"engine._C was built without CUDA kernels ({extension_status().detail})")
