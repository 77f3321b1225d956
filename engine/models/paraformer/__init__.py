"""FunASR Paraformer: SAN-M encoder, CIF predictor, one-pass non-autoregressive decoder. The
offline model (and SeACo's hotword one) runs whole files (runner.py); paraformer-online
(`ParaformerStreaming`) streams chunk by chunk (online_runner.py).

Checkpoint directories as FunASR releases them: config.yaml, model.pt (a state dict),
tokens.json or tokens.txt or a SentencePiece bpe.model, am.mvn. Options: `ParaformerOptions`
(engine/models/paraformer/options.py). Importing this package loads no torch code: the runner is
imported when a checkpoint is built.
"""

from __future__ import annotations

from engine.config import EngineConfig
from engine.families import ModelFamily
from engine.models.paraformer.options import ParaformerOptions
from engine.runner import ModelInfo, ModelRunner


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    from engine.models.paraformer.files import detect as detect_checkpoint

    return detect_checkpoint(ckpt_dir, checkpoint_name)


def build(config: EngineConfig, options: ParaformerOptions) -> ModelRunner:
    from engine.device import resolve_device, resolve_dtype
    from engine.models.paraformer.checkpoint import load_checkpoint
    from engine.models.paraformer.online_runner import ParaformerOnlineRunner
    from engine.models.paraformer.runner import ParaformerRunner

    device = resolve_device(config)
    ckpt = load_checkpoint(config.resolved_ckpt_dir(), device, resolve_dtype(config, device), config.checkpoint_name)
    if ckpt.config.online:
        return ParaformerOnlineRunner(ckpt, config, device, options)
    return ParaformerRunner(ckpt, config, device, options)


def describe(config: EngineConfig, options: ParaformerOptions) -> ModelInfo:
    from engine.models.paraformer.info import describe as describe_config

    return describe_config(config, options)


FAMILY = ModelFamily(name="paraformer", detect=detect, build=build, options=ParaformerOptions, describe=describe,
                     not_converted="FunASR's model.pt is one state dict beside its config, CMVN and tokens: nothing to unpack or fold",
                     not_quantized="its runner computes in float only (no int8 layers to write ahead of time)",
                     hub_files=("config.yaml", "model.pt", "tokens.json", "tokens.txt", "bpe.model", "am.mvn"))

__all__ = ["FAMILY", "ParaformerOptions", "build", "describe", "detect"]
