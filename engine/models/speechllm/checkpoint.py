"""Speech-LLM checkpoints as Transformers saves them: config.json, *.safetensors,
tokenizer.json and generation_config.json. Foreign parameter names are mapped in one place
(`_our_name`); nothing here imports Transformers.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from engine.errors import CheckpointError
from engine.models.speechllm.info import model_name, speechllm_config, weight_files
from engine.models.speechllm.model import AudioEncoder, DecoderDims, EncoderDims, SpeechLLM, TwoLayerProjector
from engine.models.speechllm.prompt import AUDIO_PAD, QWEN3_AUDIO_PAD
from engine.models.speechllm.qwen3_audio import Qwen3AudioDims, Qwen3AudioEncoder
from engine.models.speechllm.tokenizer import QwenTokenizer

logger = logging.getLogger(__name__)


_PREFIXES = (
    # (checkpoint prefix, ours): the hub layout first, then Transformers 5's in-memory names
    ("audio_tower.", "audio_tower."),
    ("model.audio_tower.", "audio_tower."),
    ("multi_modal_projector.linear.", "projector."),
    ("model.multi_modal_projector.linear.", "projector."),
    ("model.multi_modal_projector.", "projector."),
    ("multi_modal_projector.", "projector."),
    ("language_model.model.", "decoder."),
    ("model.language_model.", "decoder."),
    ("language_model.lm_head.", "decoder.lm_head."),
    ("lm_head.", "decoder.lm_head."),
)
_FLATTENED = (".self_attn.", ".mlp.")
"""Sub-module levels the reference nests a layer's projections in; ours sit on the layer."""


@dataclass
class SpeechLLMCheckpoint:
    model: SpeechLLM
    tokenizer: QwenTokenizer
    model_type: str
    n_mels: int
    audio_token: int
    eos_tokens: tuple[int, ...]
    max_positions: int
    """The decoder's context (prompt + generated tokens)."""
    name: str
    weights: tuple[str, ...]
    """File names of the weights (no directories)."""


def _audio(model_type: str, a: dict[str, Any], hidden: int) -> tuple[nn.Module, nn.Module]:
    """The audio tower and projector of `model_type`."""
    if model_type == "qwen3_asr":
        tower = Qwen3AudioEncoder(Qwen3AudioDims(
            n_mels=int(a.get("num_mel_bins", 128)), d_model=int(a["d_model"]), layers=int(a["encoder_layers"]),
            heads=int(a["encoder_attention_heads"]), ffn=int(a["encoder_ffn_dim"]),
            conv_channels=int(a.get("downsample_hidden_size", 480)), n_window=int(a.get("n_window", 50)),
            n_window_infer=int(a.get("n_window_infer", 800)), max_positions=int(a.get("max_position_embeddings", 13)),
        ))  # fmt: skip
        if int(a.get("output_dim", hidden)) != hidden:
            raise CheckpointError(f"audio output_dim {a.get('output_dim')} != the decoder's hidden_size {hidden}")
        return tower, TwoLayerProjector(int(a["d_model"]), hidden)
    encoder = EncoderDims(
        n_mels=int(a.get("num_mel_bins", 128)), d_model=int(a["d_model"]), layers=int(a["encoder_layers"]),
        heads=int(a["encoder_attention_heads"]), ffn=int(a["encoder_ffn_dim"]),
        max_positions=int(a.get("max_source_positions", 1500)),
    )  # fmt: skip
    return AudioEncoder(encoder), nn.Linear(encoder.d_model, hidden)


def _dims(cfg: dict[str, Any]) -> DecoderDims:
    t = cfg["text_config"]
    rope = t.get("rope_parameters") or {}
    heads = int(t["num_attention_heads"])
    hidden = int(t["hidden_size"])
    decoder = DecoderDims(
        vocab=int(t["vocab_size"]), hidden=hidden, layers=int(t["num_hidden_layers"]), heads=heads,
        kv_heads=int(t.get("num_key_value_heads") or heads), head_dim=int(t.get("head_dim") or hidden // heads),
        intermediate=int(t["intermediate_size"]), rms_eps=float(t.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope.get("rope_theta", t.get("rope_theta", 10000.0))),
        qkv_bias=t.get("model_type", "qwen2") == "qwen2", qk_norm=t.get("model_type") == "qwen3",
        tie_embeddings=bool(t.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))),
    )  # fmt: skip
    if rope.get("rope_type", "default") != "default":
        raise CheckpointError(f"rope_type {rope['rope_type']!r} is not supported (only 'default')")
    if t.get("use_sliding_window"):
        raise CheckpointError("sliding-window attention is not supported")
    return decoder


def _our_name(name: str) -> str | None:
    for theirs, ours in _PREFIXES:
        if name.startswith(theirs):
            name = ours + name[len(theirs):]
            break
    else:
        return None
    for level in _FLATTENED:
        name = name.replace(level, ".")
    if name == "audio_tower.embed_positions.weight":
        return "audio_tower.embed_positions"
    return name


def _eos_tokens(ckpt_dir: str, cfg: dict[str, Any], tok: QwenTokenizer) -> tuple[int, ...]:
    found: list[int] = []
    try:
        with open(os.path.join(ckpt_dir, "generation_config.json")) as f:
            value = json.load(f).get("eos_token_id")
        found = list(value) if isinstance(value, list) else [value] if value is not None else []
    except (OSError, ValueError):
        pass
    if not found:
        found = [tok.token_id("<|im_end|>"), tok.token_id("<|endoftext|>")]
    return tuple(int(t) for t in found)


def load_checkpoint(ckpt_dir: str, device: torch.device, dtype: torch.dtype) -> SpeechLLMCheckpoint:
    cfg = speechllm_config(ckpt_dir)
    decoder = _dims(cfg)
    tower, projector = _audio(str(cfg["model_type"]), cfg["audio_config"], decoder.hidden)
    model = SpeechLLM(tower, projector, decoder)
    ours = model.state_dict()
    loaded: set[str] = set()
    files = weight_files(ckpt_dir)
    for path in files:
        with safe_open(path, "pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                target = _our_name(name)
                if target is None or target not in ours:
                    raise CheckpointError(f"{os.path.basename(path)}: unexpected tensor {name!r}")
                value = f.get_tensor(name)
                if value.shape != ours[target].shape:
                    raise CheckpointError(f"{name}: shape {tuple(value.shape)}, the config says {tuple(ours[target].shape)}")
                ours[target].copy_(value)
                loaded.add(target)
    if decoder.tie_embeddings or "decoder.lm_head.weight" not in loaded:
        ours["decoder.lm_head.weight"].copy_(ours["decoder.embed_tokens.weight"])
        loaded.add("decoder.lm_head.weight")
    missing = sorted(set(ours) - loaded)
    if missing:
        raise CheckpointError(f"{ckpt_dir!r}: the checkpoint lacks {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
    model = model.to(device=device, dtype=dtype).eval()
    model.decoder.inv_freq = model.decoder.inv_freq.float()  # rotary angles stay float32 whatever the dtype
    if isinstance(tower, Qwen3AudioEncoder):  # so does its mel front end
        tower.filters, tower.window = tower.filters.float(), tower.window.float()
    tok = QwenTokenizer(os.path.join(ckpt_dir, "tokenizer.json"))
    audio_token = cfg.get("audio_token_index", cfg.get("audio_token_id"))
    if audio_token is None:
        audio_token = tok.token_id(QWEN3_AUDIO_PAD if cfg["model_type"] == "qwen3_asr" else AUDIO_PAD)
    n_mels = int(cfg["audio_config"].get("num_mel_bins", 128))
    return SpeechLLMCheckpoint(
        model=model, tokenizer=tok, model_type=str(cfg["model_type"]), n_mels=n_mels,
        audio_token=int(audio_token), eos_tokens=_eos_tokens(ckpt_dir, cfg, tok),
        max_positions=int(cfg["text_config"].get("max_position_embeddings", 32768)), name=model_name(ckpt_dir, cfg),
        weights=tuple(os.path.basename(p) for p in files),
    )  # fmt: skip
