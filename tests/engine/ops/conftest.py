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


@pytest.fixture(autouse=True)
def _two_threads() -> Iterator[None]:
    """Two OpenMP threads even on one core: the kernels' batch loops run split across threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def needs_cuda() -> pytest.MarkDecorator:
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
