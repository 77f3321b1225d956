"""A checkpoint directory becomes the PyTorch model the runner steps: loaded, checked, moved to
its device and float type, and (int8_w8a8, or 'auto' on a CPU with VNNI) quantized."""

from __future__ import annotations

import torch

from engine.config import EngineConfig
from engine.errors import CheckpointError, InvalidRequestError
from engine.models.whisper.int8 import int8_gemm_kind, quantize_linear_layers
from engine.models.whisper.loader import LoadedCheckpoint, load_checkpoint
from engine.models.whisper.model import Whisper


def build_model(ckpt_dir: str, config: EngineConfig, device: torch.device,
                dtype: torch.dtype) -> tuple[Whisper, LoadedCheckpoint]:
    ckpt = load_checkpoint(ckpt_dir, config.checkpoint_name)
    model = Whisper(ckpt.dims)
    missing, unexpected = model.load_state_dict(ckpt.state_dict, strict=False)
    missing = [k for k in missing if k != "encoder.positional_embedding"]  # sinusoids, computed
    if missing or unexpected:
        raise CheckpointError(f"{ckpt_dir}: missing {missing[:5]} unexpected {unexpected[:5]}")
    model.eval().requires_grad_(False)
    model = model.to(device, dtype)
    if uses_int8(config, device):
        quantize_linear_layers(model)
        model.decoder.quantize_output_projection()
    return model, ckpt


def uses_int8(config: EngineConfig, device: torch.device) -> bool:
    """int8_w8a8 as asked, or by 'auto' on a CPU whose int8 GEMM is exact at 8 bits (int8.py)."""
    if config.quantization == "int8_w8a8":
        if device.type != "cpu":
            raise InvalidRequestError("quantization='int8_w8a8' runs on CPU; use fp16/bf16 on CUDA")
        return True
    return config.quantization == "auto" and device.type == "cpu" and int8_gemm_kind() == "vnni"
