"""Loading a FunASR Paraformer model directory: `config.yaml`, `model.pt` (a state dict, as
FunASR's released checkpoints are), the token list (`tokens.json` or `tokens.txt`, or the pieces
of the SentencePiece model `tokenizer_conf.bpemodel` names), that model when there is one, and
the front end's CMVN (`am.mvn`)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

from engine.errors import CheckpointError
from engine.models.paraformer.config import ParaformerConfig
from engine.models.paraformer.files import CMVN_FILE, WEIGHTS_FILE, read_configuration, read_seg_dict
from engine.models.paraformer.frontend import load_cmvn
from engine.models.paraformer.model import Paraformer

logger = logging.getLogger(__name__)

IGNORED_PREFIXES = ("ctc.", "criterion_att.", "criterion_pre.", "criterion_seaco.")
"""Training-only weights: the CTC branch is an auxiliary loss FunASR's greedy decoding does not
read. (The decoder's token embedding is read only by SeACo; a plain model skips it.)"""
SEACO_PREFIXES = ("bias_encoder.", "lstm_proj.", "seaco_decoder.", "hotword_output_layer.")
"""SeACo's modules sit at the top of FunASR's state dict; here they live under `seaco.`."""


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


def load_checkpoint(ckpt_dir: str, device: torch.device, dtype: torch.dtype,
                    checkpoint_name: str | None = None) -> ParaformerCheckpoint:  # fmt: skip
    conf = read_configuration(ckpt_dir)
    raw, cfg, tokens, sentencepiece = conf.raw, conf.config, conf.tokens, conf.sentencepiece
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
