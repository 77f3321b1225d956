"""An icefall Zipformer2 transducer checkpoint directory -> the model, its config and tokenizer.

A directory holds:
- the weights: `pretrained.pt` (export.py: `{"model": state_dict}`) or `epoch-N.pt` (training's
  save_checkpoint: the state dict under "model" beside every training parameter), or the file
  `EngineConfig.checkpoint_name` names;
- the arguments that shape the model: `model_args.json` (icefall's train.py argument names, e.g.
  {"encoder_dim": "192,256,384,512,384,256", "causal": true, ...}), else those recorded in an
  `epoch-N.pt` (only the model-shaping ones are read there; the rest are training knobs);
- the vocabulary: `bpe.model` (SentencePiece) or `tokens.txt` ("piece id" lines).

Unknown arguments in model_args.json are refused by name; the state dict must match the model
built from the arguments exactly (missing or unexpected tensors are refused by name).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine.errors import CheckpointError
from engine.models.zipformer.config import ZipformerConfig
from engine.models.zipformer.encoder import ZipformerEncoder
from engine.models.zipformer.files import ARGS_FILE, read_config, weights_file
from engine.models.zipformer.info import model_name
from engine.models.zipformer.tokenizer import Tokenizer
from engine.models.zipformer.transducer import Joiner, Predictor

logger = logging.getLogger(__name__)

UNUSED_PREFIXES = ("simple_am_proj.", "simple_lm_proj.", "ctc_output.", "attention_decoder.")
"""Training-only heads in icefall's state dict (pruned-RNN-T projections, CTC, attention decoder)."""


class ZipformerModel(nn.Module):
    def __init__(self, cfg: ZipformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = ZipformerEncoder(cfg)
        self.decoder = Predictor(cfg.vocab_size, cfg.decoder_dim, cfg.blank_id, cfg.context_size)
        self.joiner = Joiner(cfg.output_dim, cfg.decoder_dim, cfg.joiner_dim, cfg.vocab_size)


@dataclass
class ZipformerCheckpoint:
    model: ZipformerModel
    config: ZipformerConfig
    tokenizer: Tokenizer
    path: str
    name: str


def _remap(name: str) -> str | None:
    """icefall state-dict name -> ours (None: a training-only tensor)."""
    if name.startswith(UNUSED_PREFIXES):
        return None
    if name.startswith("encoder_embed."):
        return "encoder.embed." + name[len("encoder_embed."):]
    return re.sub(r"^encoder\.encoders\.(\d+)\.encoder\.", r"encoder.encoders.\1.", name)


def icefall_state_dict(model: ZipformerModel) -> dict[str, torch.Tensor]:
    """Our state dict under icefall's names (the inverse of `_remap`): how tools write checkpoints
    of this family (e.g. benchmarks' random models) that icefall's own loader would also take."""
    ds = model.cfg.downsampling_factor
    out = {}
    for name, t in model.state_dict().items():
        if name.startswith("encoder.embed."):
            name = "encoder_embed." + name[len("encoder.embed."):]
        elif (m := re.match(r"^encoder\.encoders\.(\d+)\.layers\.", name)) and ds[int(m.group(1))] > 1:
            name = name.replace(f"encoder.encoders.{m.group(1)}.", f"encoder.encoders.{m.group(1)}.encoder.", 1)
        out[name] = t
    return out


def load_checkpoint(ckpt_dir: str, checkpoint_name: str | None, device: torch.device,
                    dtype: torch.dtype) -> ZipformerCheckpoint:  # fmt: skip
    weights = weights_file(ckpt_dir, checkpoint_name)
    if weights is None:
        raise CheckpointError(f"{ckpt_dir}: no pretrained.pt or epoch-N.pt")
    path = Path(ckpt_dir) / weights
    try:
        blob: Any = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot be read as a torch checkpoint: {exc}") from exc
    if not isinstance(blob, dict) or "model" not in blob:
        raise CheckpointError(f"{path}: expected icefall's {{'model': state_dict, ...}}")
    tokenizer = Tokenizer.from_dir(ckpt_dir)
    cfg, where = read_config(ckpt_dir, tokenizer, None if (Path(ckpt_dir) / ARGS_FILE).is_file() else (blob, path))
    model = ZipformerModel(cfg)
    state = {}
    for k, v in blob["model"].items():
        ours = _remap(k)
        if ours is not None:
            state[ours] = v
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(
            f"{path}: state dict does not match the model built from {where}: "
            f"missing {result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}"
        )
    model.to(device=device, dtype=dtype).eval()
    logger.info("loaded Zipformer %s: %d stacks, dims %s, causal=%s, %d parameters", path, cfg.num_stacks,
                cfg.encoder_dim, cfg.causal, sum(p.numel() for p in model.parameters()))  # fmt: skip
    return ZipformerCheckpoint(model, cfg, tokenizer, str(path), model_name(ckpt_dir))
