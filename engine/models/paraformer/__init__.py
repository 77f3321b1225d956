"""FunASR Paraformer: SAN-M encoder, CIF predictor, one-pass non-autoregressive decoder; offline.

Checkpoint directories as FunASR releases them: config.yaml, model.pt (a state dict),
tokens.json or tokens.txt, am.mvn. Options: `ParaformerOptions`
(engine/models/paraformer/options.py). Importing this package loads no torch code: the runner is
imported when a checkpoint is built.
"""

from __future__ import annotations

from engine.config import EngineConfig
from engine.families import ModelFamily
from engine.models.paraformer.options import ParaformerOptions
from engine.runner import ModelRunner


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    from engine.models.paraformer.checkpoint import detect as detect_checkpoint

    return detect_checkpoint(ckpt_dir, checkpoint_name)


def build(config: EngineConfig, options: ParaformerOptions) -> ModelRunner:
    from engine.models.paraformer.runner import ParaformerRunner

    return ParaformerRunner.from_config(config, options)


FAMILY = ModelFamily(name="paraformer", detect=detect, build=build, options=ParaformerOptions,
                     hub_files=("config.yaml", "model.pt", "tokens.json", "tokens.txt", "am.mvn"))

__all__ = ["FAMILY", "ParaformerOptions", "build", "detect"]
