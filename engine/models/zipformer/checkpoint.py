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

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine.errors import CheckpointError
from engine.models.zipformer.config import KNOWN, ZipformerConfig
from engine.models.zipformer.encoder import ZipformerEncoder
from engine.models.zipformer.tokenizer import Tokenizer
from engine.models.zipformer.transducer import Joiner, Predictor

logger = logging.getLogger(__name__)

ARGS_FILE = "model_args.json"
WEIGHT_NAMES = ("pretrained.pt",)
EPOCH = re.compile(r"epoch-(\d+)\.pt$")
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


def weights_file(ckpt_dir: str, checkpoint_name: str | None) -> str | None:
    if checkpoint_name is not None:
        return checkpoint_name if (checkpoint_name.endswith(".pt") or checkpoint_name.endswith(".pth")) else None
    try:
        names = os.listdir(ckpt_dir)
    except OSError:
        return None
    for n in WEIGHT_NAMES:
        if n in names:
            return n
    epochs = sorted((int(m.group(1)), n) for n in names if (m := EPOCH.match(n)))
    return epochs[-1][1] if epochs else None


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    """A weights file plus model_args.json, or an epoch-N.pt (it carries its args), and a vocabulary."""
    weights = weights_file(ckpt_dir, checkpoint_name)
    if weights is None:
        return False
    d = Path(ckpt_dir)
    has_vocab = (d / "bpe.model").is_file() or (d / "tokens.txt").is_file()
    return has_vocab and ((d / ARGS_FILE).is_file() or EPOCH.search(weights) is not None)


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
    args_path = Path(ckpt_dir) / ARGS_FILE
    if args_path.is_file():
        try:
            raw = json.loads(args_path.read_text())
        except ValueError as exc:
            raise CheckpointError(f"{args_path}: not JSON: {exc}") from exc
        where = str(args_path)
    else:  # epoch-N.pt: training parameters sit beside the state dict; read the model's only
        raw = {k: v for k, v in blob.items() if k in KNOWN}
        where = f"{path} (its recorded training arguments)"
    tokenizer = Tokenizer.from_dir(ckpt_dir)
    raw = dict(raw)
    raw.setdefault("vocab_size", tokenizer.vocab_size)
    cfg = ZipformerConfig.from_args(raw, where)
    if cfg.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(f"{where}: vocab_size {cfg.vocab_size}, the vocabulary has {tokenizer.vocab_size}")
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
    return ZipformerCheckpoint(model, cfg, tokenizer, str(path), Path(ckpt_dir).name)
