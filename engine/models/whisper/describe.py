"""What a Whisper checkpoint is and can do, from its sizes alone: the one place the runner's
`info()` and the family's `describe` (its info before loading, for /v1/models) take the model's
name, languages and capabilities from, so the two cannot disagree.

A checkpoint's sizes are read without its weights: OASR's manifest, the Transformers
config.json, the CTranslate2 file's variable headers (memory-mapped) or the OpenAI `.pt`'s
`dims` (memory-mapped).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from engine.capabilities import Capabilities
from engine.config import EngineConfig
from engine.errors import CheckpointError
from engine.log_mel import SAMPLE_RATE
from engine.models.whisper import native
from engine.models.whisper.loader import detect_format, read_ct2_shapes
from engine.models.whisper.options import WhisperOptions
from engine.models.whisper.tokenizer import LANGUAGES
from engine.runner import ModelInfo
from engine.types import MAX_BEAM_SIZE, MAX_N_BEST

MODEL_SIZES = {384: "tiny", 512: "base", 768: "small", 1024: "medium", 1280: "large"}  # by encoder width
MULTILINGUAL_VOCAB = 51865
"""Vocabulary size from which a checkpoint is multilingual (English-only ones have 51864)."""


@dataclass(frozen=True)
class WhisperSize:
    """The two sizes that say which Whisper a checkpoint is."""

    n_audio_state: int
    """Encoder width: tiny 384 … large 1280."""
    n_vocab: int

    @property
    def multilingual(self) -> bool:
        return self.n_vocab >= MULTILINGUAL_VOCAB

    @property
    def num_languages(self) -> int:
        return self.n_vocab - 51765 - int(self.multilingual)

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(LANGUAGES[: self.num_languages]) if self.multilingual else ("en",)

    @property
    def model_name(self) -> str:
        name = MODEL_SIZES.get(self.n_audio_state, f"d{self.n_audio_state}")
        return name if self.multilingual else f"{name}.en"


def whisper_info(size: WhisperSize, *, checkpoint_format: str, config: EngineConfig, options: WhisperOptions,
                 parameters: int = 0, loaded_details: dict[str, object] | None = None) -> ModelInfo:
    """The ModelInfo of a Whisper checkpoint of `size`; `loaded_details` adds what only a load
    knows (device, dtype, quantization)."""
    multilingual = size.multilingual
    return ModelInfo(
        family="whisper",
        model=size.model_name,
        sample_rate=SAMPLE_RATE,
        languages=size.languages,
        supports_streaming=True,  # by re-decoding a sliding window (streaming.py)
        streaming_styles=("sliding_window",),
        decode_methods=("autoregressive",),
        decode_method="autoregressive",
        capabilities=Capabilities(
            max_beam_size=MAX_BEAM_SIZE, max_n_best=MAX_N_BEST, sampling=True, prompt=True, keywords=True,
            logprobs=True, language=multilingual, translate=multilingual, word_timestamps=True, max_new_tokens=True,
            no_speech=True, previous_text=True, delay=True),
        checkpoint_format=checkpoint_format,
        parameters=parameters,
        details={
            "multilingual": multilingual,
            "tasks": ["transcribe", "translate"] if multilingual else ["transcribe"],
            **(loaded_details or {}),
            "offline_encoder_context": options.offline_encoder_context,
            "max_batch_size": config.max_batch_size,
        },
    )


def read_size(ckpt_dir: str, checkpoint_name: str | None = None) -> tuple[str, WhisperSize]:
    """(format, sizes) of the Whisper checkpoint in `ckpt_dir`, its weights unread."""
    fmt = detect_format(ckpt_dir, checkpoint_name)
    try:
        if fmt == "oasr":
            dims = native.read_manifest(ckpt_dir)["dims"]
            return fmt, WhisperSize(int(dims["n_audio_state"]), int(dims["n_vocab"]))
        if fmt == "huggingface":
            with open(os.path.join(ckpt_dir, "config.json")) as f:
                cfg = json.load(f)
            return fmt, WhisperSize(int(cfg["d_model"]), int(cfg["vocab_size"]))
        if fmt == "ctranslate2":
            shapes = read_ct2_shapes(os.path.join(ckpt_dir, "model.bin"))
            return fmt, WhisperSize(shapes["encoder/conv1/weight"][0], shapes["decoder/embeddings/weight"][0])
        if fmt == "openai":
            dims = _openai_dims(ckpt_dir, checkpoint_name)
            return fmt, WhisperSize(int(dims["n_audio_state"]), int(dims["n_vocab"]))
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise CheckpointError(f"{ckpt_dir!r}: the Whisper checkpoint's sizes are unreadable ({exc!r})") from exc
    raise CheckpointError(f"{ckpt_dir!r} holds no Whisper checkpoint (CTranslate2, OpenAI .pt or HF safetensors)")


def _openai_dims(ckpt_dir: str, checkpoint_name: str | None) -> Any:
    import torch

    name = checkpoint_name or next(n for n in sorted(os.listdir(ckpt_dir)) if n.endswith(".pt"))
    blob = torch.load(os.path.join(ckpt_dir, name), map_location="cpu", weights_only=True, mmap=True)
    return blob["dims"]


def describe(config: EngineConfig, options: WhisperOptions) -> ModelInfo:
    fmt, size = read_size(config.resolved_ckpt_dir(), config.checkpoint_name)
    return whisper_info(size, checkpoint_format=fmt, config=config, options=options)


__all__ = ["MODEL_SIZES", "WhisperSize", "describe", "read_size", "whisper_info"]
