"""Whisper family: CTranslate2 / OpenAI / Hugging Face checkpoints, offline and streaming.

Options: `WhisperOptions` (engine/models/whisper/options.py). Importing this package loads no
torch code: the runner is imported when a checkpoint is built.
"""

from __future__ import annotations

from engine.config import EngineConfig
from engine.families import ModelFamily
from engine.models.whisper.options import WhisperOptions
from engine.quantization import QuantizationConfig
from engine.runner import ModelInfo, ModelRunner


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    from engine.models.whisper.loader import detect_format

    return detect_format(ckpt_dir, checkpoint_name) is not None


def convert(ckpt_dir: str, checkpoint_name: str | None, out_dir: str) -> None:
    from engine.models.whisper.convert import convert as write_native

    write_native(ckpt_dir, checkpoint_name, out_dir)


def quantize(ckpt_dir: str, checkpoint_name: str | None, out_dir: str, quantization: QuantizationConfig) -> None:
    from engine.models.whisper.convert import quantize as write_quantized

    write_quantized(ckpt_dir, checkpoint_name, out_dir, quantization)


def describe(config: EngineConfig, options: WhisperOptions) -> ModelInfo:
    from engine.models.whisper.describe import describe as describe_checkpoint

    return describe_checkpoint(config, options)


def build(config: EngineConfig, options: WhisperOptions) -> ModelRunner:
    from engine.models.whisper.runner import WhisperRunner

    return WhisperRunner(config, options)


FAMILY = ModelFamily(name="whisper", detect=detect, build=build, options=WhisperOptions,
                     online_quantization=("int8_w8a8",), convert=convert, quantize=quantize, describe=describe,
                     # OASR's own, CTranslate2, Transformers (safetensors) and OpenAI .pt layouts (loader.py)
                     hub_files=("oasr.json", "model.bin", "model.safetensors", "*.pt", "config.json", "tokenizer.json",
                                "generation_config.json"))

__all__ = ["FAMILY", "WhisperOptions", "build", "convert", "describe", "detect", "quantize"]
