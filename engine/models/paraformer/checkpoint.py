"""Loading a FunASR Paraformer model directory: `config.yaml`, `model.pt` (a state dict, as
FunASR's released checkpoints are), the token list (`tokens.json` or `tokens.txt`, or the pieces
of the SentencePiece model `tokenizer_conf.bpemodel` names), that model when there is one, and
the front end's CMVN (`am.mvn`)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
import yaml

from engine.errors import CheckpointError
from engine.models.paraformer.config import ParaformerConfig, parse_config
from engine.models.paraformer.frontend import load_cmvn
from engine.models.paraformer.model import Paraformer

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
WEIGHTS_FILE = "model.pt"
TOKEN_FILES = ("tokens.json", "tokens.txt")
CMVN_FILE = "am.mvn"
IGNORED_PREFIXES = ("ctc.", "criterion_att.", "criterion_pre.", "criterion_seaco.")
"""Training-only weights: the CTC branch is an auxiliary loss FunASR's greedy decoding does not
read. (The decoder's token embedding is read only by SeACo; a plain model skips it.)"""
SEACO_PREFIXES = ("bias_encoder.", "lstm_proj.", "seaco_decoder.", "hotword_output_layer.")
"""SeACo's modules sit at the top of FunASR's state dict; here they live under `seaco.`."""
SEG_DICT_FILE = "seg_dict"


@dataclass
class ParaformerCheckpoint:
    model: Paraformer
    config: ParaformerConfig
    tokens: list[str]
    cmvn: tuple[torch.Tensor, torch.Tensor] | None
    weights_path: str
    model_class: str
    seg_dict: dict[str, list[str]] | None = None
    """word -> tokens (`seg_dict`): how FunASR spells a hotword's words."""
    sentencepiece: Any | None = None
    """The SentencePiece model (`sentencepiece.SentencePieceProcessor`) that spells the tokens, when
    config.yaml names one (`tokenizer_conf.bpemodel`)."""


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    """A FunASR model directory whose config names a Paraformer (the loader refuses the variants
    it does not serve with a message, rather than leaving the directory unrecognised)."""
    weights = os.path.join(ckpt_dir, checkpoint_name or WEIGHTS_FILE)
    config = os.path.join(ckpt_dir, CONFIG_FILE)
    if not (os.path.isfile(weights) and weights.endswith(".pt") and os.path.isfile(config)):
        return False
    try:
        raw = _read_yaml(config)
    except CheckpointError:
        return False
    return "Paraformer" in str(raw.get("model", "")) and raw.get("encoder") is not None


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise CheckpointError(f"{os.path.basename(path)}: {exc}") from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{os.path.basename(path)}: expected a mapping")
    return raw


def read_tokens(ckpt_dir: str, sentencepiece: Any | None = None) -> list[str]:
    """The token list file, or else the SentencePiece model's pieces in id order."""
    for name in TOKEN_FILES:
        path = os.path.join(ckpt_dir, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            if name.endswith(".json"):
                tokens = json.load(f)
                if not (isinstance(tokens, list) and all(isinstance(t, str) for t in tokens)):
                    raise CheckpointError(f"{name}: expected a JSON list of token strings")
                return tokens
            return [line.rstrip("\n").split(" ")[0] for line in f if line.strip()]
    if sentencepiece is not None:
        return [str(sentencepiece.id_to_piece(i)) for i in range(int(sentencepiece.get_piece_size()))]
    raise CheckpointError(f"no token list ({' or '.join(TOKEN_FILES)}) and no SentencePiece model in the "
                          "checkpoint directory")  # fmt: skip


def load_sentencepiece(ckpt_dir: str, raw: dict[str, Any]) -> Any | None:
    """The SentencePiece model config.yaml names (`tokenizer_conf.bpemodel`, looked up in the
    checkpoint directory by its file name, as FunASR resolves it), or None."""
    conf = raw.get("tokenizer_conf") or {}
    name = conf.get("bpemodel") if isinstance(conf, dict) else None
    if name is None:
        return None
    path = os.path.join(ckpt_dir, os.path.basename(str(name)))
    if not os.path.isfile(path):
        raise CheckpointError(f"config.yaml: tokenizer_conf.bpemodel={name!r}: no {os.path.basename(str(name))} "
                              "in the checkpoint directory")  # fmt: skip
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    try:
        sp.load(path)
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"{os.path.basename(path)}: {exc}") from exc
    return sp


def load_checkpoint(ckpt_dir: str, device: torch.device, dtype: torch.dtype,
                    checkpoint_name: str | None = None) -> ParaformerCheckpoint:  # fmt: skip
    raw = _read_yaml(os.path.join(ckpt_dir, CONFIG_FILE))
    sentencepiece = load_sentencepiece(ckpt_dir, raw)
    tokens = read_tokens(ckpt_dir, sentencepiece)
    cfg = parse_config(raw, len(tokens))
    cmvn_path = os.path.join(ckpt_dir, CMVN_FILE)
    cmvn = load_cmvn(cmvn_path) if os.path.isfile(cmvn_path) else None
    if cmvn is None:
        logger.warning("%s has no %s: features are not normalised", ckpt_dir, CMVN_FILE)
    weights_path = os.path.join(ckpt_dir, checkpoint_name or WEIGHTS_FILE)
    try:
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a bad file
        raise CheckpointError(f"{os.path.basename(weights_path)}: {exc}") from exc
    for key in ("state_dict", "model_state_dict", "model"):  # FunASR's training wrappers
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    state = {k.removeprefix("module."): v for k, v in state.items()}
    state = {("seaco." + k if k.startswith(SEACO_PREFIXES) else k): v for k, v in state.items()
             if not k.startswith(IGNORED_PREFIXES) and not (cfg.seaco is None and k.startswith("decoder.embed."))}
    model = Paraformer(cfg)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape that disagrees with config.yaml or the token list
        raise CheckpointError(f"{os.path.basename(weights_path)} does not match config.yaml: {exc}") from exc
    if missing or unexpected:
        raise CheckpointError(
            f"{os.path.basename(weights_path)} does not match config.yaml: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )
    model.to(device=device, dtype=dtype).eval()
    return ParaformerCheckpoint(model, cfg, tokens, cmvn, weights_path, str(raw["model"]), read_seg_dict(ckpt_dir),
                                sentencepiece)  # fmt: skip


def read_seg_dict(ckpt_dir: str) -> dict[str, list[str]] | None:
    path = os.path.join(ckpt_dir, SEG_DICT_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        rows = [line.split() for line in f]
    return {r[0]: r[1:] for r in rows if r}
