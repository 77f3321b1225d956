"""An icefall Zipformer directory's files, read without torch: which file holds the weights, and
the configuration (model_args.json and the vocabulary). What detection, `describe` and the loader
share (layout: checkpoint.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from engine.errors import CheckpointError
from engine.models.zipformer.config import KNOWN, ZipformerConfig
from engine.models.zipformer.tokenizer import Tokenizer

ARGS_FILE = "model_args.json"
WEIGHT_NAMES = ("pretrained.pt",)
EPOCH = re.compile(r"epoch-(\d+)\.pt$")


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


def read_config(ckpt_dir: str, tokenizer: Tokenizer, recorded: tuple[dict[str, Any], Path] | None = None
                ) -> tuple[ZipformerConfig, str]:  # fmt: skip
    """The model's shape from model_args.json, else from `recorded`: the (checkpoint, path) of an
    `epoch-N.pt` whose training arguments sit beside its state dict (only the model's are read);
    with where they were read from, for messages."""
    args_path = Path(ckpt_dir) / ARGS_FILE
    if recorded is None:
        try:
            raw = json.loads(args_path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{args_path}: not readable JSON: {exc}") from exc
        where = str(args_path)
    else:
        blob, path = recorded
        raw = {k: v for k, v in blob.items() if k in KNOWN}
        where = f"{path} (its recorded training arguments)"
    raw = dict(raw)
    raw.setdefault("vocab_size", tokenizer.vocab_size)
    cfg = ZipformerConfig.from_args(raw, where)
    if cfg.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(f"{where}: vocab_size {cfg.vocab_size}, the vocabulary has {tokenizer.vocab_size}")
    return cfg, where
