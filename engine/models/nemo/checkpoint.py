"""Load a `.nemo` checkpoint into the family's torch modules: config checked, weights mapped from
NeMo's names in one place, tokenizer read from the archive.

NeMo name                                  ours
preprocessor.featurizer.{window,fb}        frontend (not a module)
encoder.*                                  encoder.*           (same layout)
decoder.prediction.* / joint.{pred,enc}.*  transducer.decoder.prediction.* / transducer.joint.*
joint.joint_net.<last>.*                   transducer.joint.joint_net.1.*  (<last> moves with dropout)
decoder.decoder_layers.* (CTC model)       ctc.decoder_layers.*
ctc_decoder.decoder_layers.* (hybrid)      ctc.decoder_layers.*
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

import torch
from torch import nn

from engine.errors import CheckpointError
from engine.models.nemo import native
from engine.models.nemo.archive import NemoArchive, find_checkpoint, read_archive
from engine.models.nemo.config import ModelConfig, parse_config
from engine.models.nemo.ctc import CtcHead
from engine.models.nemo.encoder import ConformerEncoder
from engine.models.nemo.frontend import MelFrontend
from engine.models.nemo.tokenizer import Tokenizer
from engine.models.nemo.transducer import Transducer

logger = logging.getLogger(__name__)

_JOINT_OUT = re.compile(r"^joint\.joint_net\.(\d+)\.(weight|bias)$")


class NemoModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = ConformerEncoder(cfg.encoder)
        self.transducer = Transducer(cfg.transducer, cfg.encoder.d_model) if cfg.transducer else None
        self.ctc = CtcHead(cfg.encoder.d_model, cfg.ctc_classes) if cfg.ctc_classes else None


@dataclass
class NemoCheckpoint:
    path: str
    config: ModelConfig
    model: NemoModel
    frontend: MelFrontend
    tokenizer: Tokenizer

    @property
    def name(self) -> str:
        """The checkpoint's file name without its directory (what /v1/models shows)."""
        return os.path.splitext(os.path.basename(self.path))[0]


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    """A directory holding the named `.nemo` (or any `.nemo` when none is named), or one unpacked
    by `oasr convert` (native.py)."""
    if not os.path.isdir(ckpt_dir):
        return False
    if checkpoint_name is None and native.is_native(ckpt_dir):
        return True
    if checkpoint_name:
        return checkpoint_name.endswith(".nemo") and os.path.isfile(os.path.join(ckpt_dir, checkpoint_name))
    return any(f.endswith(".nemo") for f in os.listdir(ckpt_dir))


def load_checkpoint(
    ckpt_dir: str, checkpoint_name: str | None, device: torch.device, dtype: torch.dtype
) -> NemoCheckpoint:
    if checkpoint_name is None and native.is_native(ckpt_dir):
        archive = native.read(ckpt_dir)
    else:
        archive = read_archive(find_checkpoint(ckpt_dir, checkpoint_name))
    cfg = parse_config(archive.config)
    model = NemoModel(cfg)
    frontend_tensors = _load_weights(model, archive)
    model.to(device=device, dtype=dtype).eval()
    frontend = MelFrontend(cfg.mel, frontend_tensors["window"].to(device), frontend_tensors["fb"].to(device))
    vocab = cfg.transducer.vocab_size if cfg.transducer else (cfg.ctc_classes or 1) - 1
    tokenizer = Tokenizer(archive.artifact(cfg.tokenizer_model, "tokenizer.model_path"), vocab)
    logger.info(
        "loaded %s: %s, %d layers x d_model %d, %s attention %s, %d parameters",
        archive.path, cfg.architecture, cfg.encoder.n_layers, cfg.encoder.d_model,
        cfg.encoder.att_context_style, list(cfg.encoder.att_context_sizes), sum(p.numel() for p in model.parameters()),
    )  # fmt: skip
    return NemoCheckpoint(archive.path, cfg, model, frontend, tokenizer)


def _load_weights(model: NemoModel, archive: NemoArchive) -> dict[str, torch.Tensor]:
    mapped: dict[str, torch.Tensor] = {}
    frontend: dict[str, torch.Tensor] = {}
    hybrid = model.cfg.architecture == "hybrid"
    for name, tensor in archive.state_dict.items():
        if name.startswith("preprocessor.featurizer."):
            frontend[name.rsplit(".", 1)[1]] = tensor
        elif name.startswith("encoder."):
            mapped[name] = tensor
        elif (m := _JOINT_OUT.match(name)) and model.transducer is not None:
            mapped[f"transducer.joint.joint_net.1.{m.group(2)}"] = tensor
        elif name.startswith(("joint.", "decoder.prediction.")) and model.transducer is not None:
            mapped[f"transducer.{name}"] = tensor
        elif name.startswith("ctc_decoder.decoder_layers.") and hybrid:
            mapped["ctc." + name.removeprefix("ctc_decoder.")] = tensor
        elif name.startswith("decoder.decoder_layers.") and model.cfg.architecture == "ctc":
            mapped["ctc." + name.removeprefix("decoder.")] = tensor
        else:
            mapped[name] = tensor  # reported as unexpected below
    for needed in ("window", "fb"):
        if needed not in frontend:
            raise CheckpointError(f"{archive.path}: weights lack preprocessor.featurizer.{needed}")
    expected = model.state_dict()
    missing = sorted(set(expected) - set(mapped))
    unexpected = sorted(set(mapped) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{archive.path}: weights do not match the config (unsupported feature?): "
            f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    for name, tensor in mapped.items():
        if tensor.shape != expected[name].shape:
            raise CheckpointError(
                f"{archive.path}: {name} has shape {tuple(tensor.shape)}, the config implies {tuple(expected[name].shape)}"
            )
    model.load_state_dict(mapped)
    return frontend
