"""A FunASR Paraformer directory's configuration files, read without torch: config.yaml, the token
list or SentencePiece model, seg_dict. What detection, `describe` and the loader share."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from engine.checkpoint_files import read_yaml_mapping
from engine.errors import CheckpointError
from engine.models.paraformer.config import ParaformerConfig, parse_config

CONFIG_FILE = "config.yaml"
WEIGHTS_FILE = "model.pt"
TOKEN_FILES = ("tokens.json", "tokens.txt")
CMVN_FILE = "am.mvn"
SEG_DICT_FILE = "seg_dict"


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    """A FunASR model directory whose config names a Paraformer (the loader refuses the variants
    it does not serve with a message, rather than leaving the directory unrecognised)."""
    weights = os.path.join(ckpt_dir, checkpoint_name or WEIGHTS_FILE)
    config = os.path.join(ckpt_dir, CONFIG_FILE)
    if not (os.path.isfile(weights) and weights.endswith(".pt") and os.path.isfile(config)):
        return False
    try:
        raw = read_yaml_mapping(config)
    except CheckpointError:
        return False
    return "Paraformer" in str(raw.get("model", "")) and raw.get("encoder") is not None




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


def read_seg_dict(ckpt_dir: str) -> dict[str, list[str]] | None:
    path = os.path.join(ckpt_dir, SEG_DICT_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        rows = [line.split() for line in f]
    return {r[0]: r[1:] for r in rows if r}


@dataclass(frozen=True)
class Configuration:
    """What a Paraformer directory says of itself, weights aside."""

    raw: dict[str, Any]
    """config.yaml as parsed."""
    config: ParaformerConfig
    tokens: list[str]
    sentencepiece: Any | None
    """The SentencePiece model config.yaml names (`load_sentencepiece`), or None."""


def read_configuration(ckpt_dir: str) -> Configuration:
    raw = read_yaml_mapping(os.path.join(ckpt_dir, CONFIG_FILE))
    sentencepiece = load_sentencepiece(ckpt_dir, raw)
    tokens = read_tokens(ckpt_dir, sentencepiece)
    return Configuration(raw, parse_config(raw, len(tokens)), tokens, sentencepiece)
