"""What `/v1/models` shows for a speech-LLM checkpoint: its kind, sizes and the options it serves.
Everything but the KV pool's size (planned from memory at load) follows from config.json, the
weight files' names and the family's options, so the runner's `info()` and `describe` (before any
load) report it through `model_info`. Torch-free."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Any

from engine.capabilities import Capabilities
from engine.config import EngineConfig
from engine.errors import CheckpointError
from engine.models.speechllm.options import SpeechLLMOptions
from engine.models.speechllm.prompt import LANGUAGE_NAMES
from engine.runner import ModelInfo

MODEL_TYPES = ("qwen2_audio", "qwen3_asr")
"""config.json `model_type`s this family loads."""
SAMPLE_RATE = 16000  # Hz, the Whisper front end's
MAX_AUDIO_SECONDS = 30
"""Longest audio one encoder pass takes (the Whisper front end's window, N_SAMPLES / SAMPLE_RATE); a
longer request is cut at silences into segments of at most this (longform.py)."""
DECODE_METHODS = ("greedy_or_beam",)
"""One decoder: greedy for beam_size 1, Transformers' beam search otherwise."""


def read_config(ckpt_dir: str) -> dict[str, Any] | None:
    path = os.path.join(ckpt_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def speechllm_config(ckpt_dir: str) -> dict[str, Any]:
    """config.json of a speech-LLM checkpoint (CheckpointError for any other directory)."""
    cfg = read_config(ckpt_dir)
    if cfg is None or cfg.get("model_type") not in MODEL_TYPES:
        raise CheckpointError(f"{ckpt_dir!r}: config.json names no speech-LLM model_type ({', '.join(MODEL_TYPES)})")
    return cfg


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    cfg = read_config(ckpt_dir)
    return cfg is not None and cfg.get("model_type") in MODEL_TYPES and bool(weight_files(ckpt_dir))


def weight_files(ckpt_dir: str) -> list[str]:
    """The safetensors files the weights are read from, in load order."""
    return sorted(glob.glob(os.path.join(ckpt_dir, "*.safetensors")))


def model_name(ckpt_dir: str, cfg: dict[str, Any]) -> str:
    """What /v1/models calls it: the repo name it was saved from, else its directory's name."""
    return os.path.basename(str(cfg.get("_name_or_path") or os.path.basename(os.path.normpath(ckpt_dir))))


@dataclass(frozen=True)
class Sizes:
    """The sizes /v1/models shows, as config.json gives them (and the built modules have)."""

    encoder_layers: int
    decoder_layers: int
    hidden_size: int
    vocab_size: int

    @classmethod
    def of(cls, cfg: dict[str, Any]) -> Sizes:
        t, a = cfg["text_config"], cfg["audio_config"]
        return cls(int(a["encoder_layers"]), int(t["num_hidden_layers"]), int(t["hidden_size"]), int(t["vocab_size"]))


def capabilities(options: SpeechLLMOptions) -> Capabilities:
    beams = options.max_beam_size
    return Capabilities(max_beam_size=beams, max_n_best=beams, prompt=True, keywords=True, logprobs=True,
                        language=True, max_new_tokens=True)


def model_info(name: str, model_type: str, weights: tuple[str, ...], sizes: Sizes, config: EngineConfig,
               options: SpeechLLMOptions, parameters: int = 0) -> ModelInfo:  # fmt: skip
    """The runner's `info()` less its KV pool's block count and, with `parameters` 0, `describe`'s."""
    return ModelInfo(
        family="speechllm",
        model=name,
        sample_rate=SAMPLE_RATE,
        languages=tuple(LANGUAGE_NAMES),
        supports_streaming=False,
        decode_methods=DECODE_METHODS,
        decode_method=DECODE_METHODS[0],
        capabilities=capabilities(options),
        checkpoint_format=f"transformers/{model_type}",
        parameters=parameters,
        details={
            "architecture": ("qwen3_asr: AuT audio encoder + projector + Qwen3 decoder" if model_type == "qwen3_asr"
                             else "qwen2_audio: Whisper audio encoder + projector + Qwen2 decoder"),
            "weights": list(weights),
            "encoder_layers": sizes.encoder_layers,
            "decoder_layers": sizes.decoder_layers,
            "hidden_size": sizes.hidden_size,
            "vocab_size": sizes.vocab_size,
            "max_audio_seconds": MAX_AUDIO_SECONDS,
            "max_new_tokens": options.max_new_tokens,
            "kv_block_tokens": config.block_size_frames or options.block_size,
        },
    )


def describe(config: EngineConfig, options: SpeechLLMOptions) -> ModelInfo:
    """The family's `describe`: config.json and the weight files' names, no tensor read."""
    ckpt_dir = config.resolved_ckpt_dir()
    cfg = speechllm_config(ckpt_dir)
    weights = tuple(os.path.basename(p) for p in weight_files(ckpt_dir))
    return model_info(model_name(ckpt_dir, cfg), str(cfg["model_type"]), weights, Sizes.of(cfg), config, options)
