"""`oasr convert` and `oasr quantize` for Whisper: any checkpoint the loader reads, written in the
native layout (native.py), in float32 or with int8 linear layers quantized once, here."""

from __future__ import annotations

import logging

import torch

from engine.config import EngineConfig
from engine.errors import InvalidRequestError
from engine.models.whisper import native
from engine.models.whisper.build import build_model
from engine.models.whisper.int8 import weight_max
from engine.models.whisper.loader import load_checkpoint
from engine.quantization import QuantizationConfig

logger = logging.getLogger(__name__)


def convert(ckpt_dir: str, checkpoint_name: str | None, out_dir: str) -> None:
    """Write the checkpoint's weights (renamed to openai's layout, float32) and facts to `out_dir`."""
    ckpt = load_checkpoint(ckpt_dir, checkpoint_name)
    assert ckpt.tokenizer_file is not None  # load_checkpoint refuses a directory without one
    native.write(out_dir, ckpt.dims, ckpt.state_dict, ckpt.tokenizer_file, alignment_heads=ckpt.alignment_heads,
                 suppress_ids=ckpt.suppress_ids, suppress_ids_begin=ckpt.suppress_ids_begin, lang_ids=ckpt.lang_ids,
                 source_format=ckpt.format, quantization=ckpt.quantization)
    logger.info("converted %s (%s) to %s", ckpt_dir, ckpt.format, out_dir)


def quantize(ckpt_dir: str, checkpoint_name: str | None, out_dir: str, quantization: QuantizationConfig) -> None:
    """Quantize the linear layers (and the logits projection) as the engine does at load with
    `quantization` (int8_w8a8, `ignore` kept in float), and write the result: serving `out_dir`
    gives the same numbers as serving `ckpt_dir` quantized online, on this machine."""
    if quantization.scheme != "int8_w8a8":
        raise InvalidRequestError(f"oasr quantize writes int8_w8a8 weights, not {quantization.scheme!r}")
    config = EngineConfig(ckpt_dir=ckpt_dir, checkpoint_name=checkpoint_name, device="cpu", dtype="float32",
                          quantization=quantization)
    model, ckpt, _ = build_model(ckpt_dir, config, torch.device("cpu"), torch.float32)
    if ckpt.quantization is not None:
        raise InvalidRequestError(f"{ckpt_dir} is already quantized ({ckpt.quantization.scheme})")
    assert ckpt.tokenizer_file is not None
    stored = native.NativeQuantization(scheme="int8_w8a8", weight_max=weight_max(), ignore=quantization.ignore)
    native.write(out_dir, ckpt.dims, model.state_dict(), ckpt.tokenizer_file, alignment_heads=ckpt.alignment_heads,
                 suppress_ids=ckpt.suppress_ids, suppress_ids_begin=ckpt.suppress_ids_begin, lang_ids=ckpt.lang_ids,
                 source_format=ckpt.format, quantization=stored)
    logger.info("quantized %s (%s) to %s: int8 weights in ±%d", ckpt_dir, ckpt.format, out_dir, stored.weight_max)


__all__ = ["convert", "quantize"]
