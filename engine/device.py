"""Where a model runs and in which float type: one rule for every model family."""

from __future__ import annotations

import torch

from engine.config import EngineConfig
from engine.errors import UnsupportedError


def resolve_device(config: EngineConfig) -> torch.device:
    """'auto' is CUDA when available, else the CPU; anything else is taken as a torch device name."""
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(config.device)


def resolve_dtype(config: EngineConfig, device: torch.device) -> torch.dtype:
    """fp16/bf16 'quantization' on CUDA is that float type; dtype 'auto' is float16 on CUDA and
    float32 elsewhere; otherwise the named torch dtype."""
    scheme = config.quantization_config().scheme
    if scheme in ("fp16", "bf16") and device.type == "cuda":
        return torch.float16 if scheme == "fp16" else torch.bfloat16
    if config.dtype == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    found = getattr(torch, config.dtype, None)
    if not isinstance(found, torch.dtype):
        raise UnsupportedError(f"unknown dtype {config.dtype!r}")
    return found
