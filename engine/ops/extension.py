"""Loads the compiled operators (`engine._C`, built by `make install`) once per process.

When the library is missing, fails to load, or `OASR_DISABLE_EXTENSIONS=1` is set, the
engine runs the Python reference of every operator instead (`engine.ops.*_reference`); the
reason is logged once, and `/v1/models` shows which path runs (`info.kernels`).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

DISABLE_ENV = "OASR_DISABLE_EXTENSIONS"
BUILD_HINT = "`make install` builds it (python -m engine.csrc.build)"


@dataclass(frozen=True)
class ExtensionStatus:
    loaded: bool
    """torch.ops.oasr.* are the compiled kernels."""
    cuda: bool
    """CUDA kernels were compiled in (a CUDA torch and nvcc at build time)."""
    detail: str
    """Where the library came from, or why the Python reference runs."""

    @property
    def backend(self) -> str:
        return "engine._C" if self.loaded else "python"

    def as_info(self) -> dict[str, object]:
        """The `kernels` entry of the engine's info (shown by /v1/models)."""
        return {"backend": self.backend, "cuda_kernels": self.cuda, "detail": self.detail}


_lock = threading.Lock()
_status: ExtensionStatus | None = None


def disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def extension_status() -> ExtensionStatus:
    """Load `engine._C` on first call (logging the outcome once) and say which path runs."""
    global _status
    with _lock:
        if _status is None:
            _status = _load()
            log = logger.info if _status.loaded or disabled_by_env() else logger.warning
            log("kernels: %s (%s)", "compiled engine._C" if _status.loaded else "Python reference", _status.detail)
        return _status


def extension_loaded() -> bool:
    return extension_status().loaded


def kernel_for(device: torch.device) -> bool:
    """Whether the loaded library has kernels for tensors on `device` (CPU, or CUDA when built with it)."""
    status = extension_status()
    return status.loaded and (device.type == "cpu" or (device.type == "cuda" and status.cuda))


def use_extension(requested: bool | None) -> bool:
    """Resolve an entry point's `use_extension=`: None follows the loader; True insists."""
    status = extension_status()
    if requested and not status.loaded:
        raise RuntimeError(f"the compiled operators are not available: {status.detail}")
    return status.loaded if requested is None else requested


def cpu_kernel(device: torch.device, requested: bool | None) -> bool:
    """Resolve `use_extension=` for an entry point whose kernel serves CPU tensors only: None runs
    it where the library is loaded and the tensors are on the CPU (elsewhere the reference);
    True insists, False declines."""
    return use_extension(kernel_for(device) and device.type == "cpu" if requested is None else requested)


def _load() -> ExtensionStatus:
    if disabled_by_env():
        return ExtensionStatus(False, False, f"{DISABLE_ENV}=1")
    try:
        import torch

        import engine._C as lib
    except ImportError as exc:
        return ExtensionStatus(False, False, f"engine._C is not built or cannot load: {exc}; {BUILD_HINT}")
    except Exception as exc:  # a library that fails its own initialisation must not stop the engine
        return ExtensionStatus(False, False, f"engine._C failed to load: {type(exc).__name__}: {exc}")
    from engine.ops import fakes

    fakes.register()
    cuda = bool(getattr(lib, "WITH_CUDA", 0))
    where = os.path.basename(lib.__file__ or "engine._C")
    kinds = "CPU and CUDA kernels" if cuda else "CPU kernels"
    torch_cuda = "" if cuda or torch.version.cuda is None else "; CUDA kernels not built"
    return ExtensionStatus(True, cuda, f"{where}: {kinds}{torch_cuda}")
