"""A checkpoint directory becomes the PyTorch model the runner steps: loaded, checked, moved to
its device and float type, and (int8_w8a8 on CPU) quantized."""

from __future__ import annotations

import torch

from engine.config import EngineConfig
from engine.errors import CheckpointError, InvalidRequestError
from engine.models.whisper.loader import LoadedCheckpoint, load_checkpoint
from engine.models.whisper.model import Whisper, quantize_linear_layers


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
    if config.quantization == "int8_w8a8":
        if device.type != "cpu":
            raise InvalidRequestError("quantization='int8_w8a8' runs on CPU; use fp16/bf16 on CUDA")
        model = quantize_linear_layers(model)  # type: ignore[assignment]
        model.decoder.quantize_output_projection()
    return model, ckpt
