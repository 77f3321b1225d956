"""WeNet U2/U2++ chunked Conformer-CTC: cache-aware streaming over a paged KV pool.

Checkpoint directories with train.yaml, a .pt state dict and units.txt. Options:
`WenetOptions` (engine/models/wenet/options.py). Importing this package loads no torch code:
the runner is imported when a checkpoint is built.
"""

from __future__ import annotations

from engine.config import EngineConfig
from engine.families import ModelFamily
from engine.models.wenet.options import WenetOptions
from engine.runner import ModelInfo, ModelRunner


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    from engine.models.wenet.config import detect as detect_checkpoint

    return detect_checkpoint(ckpt_dir, checkpoint_name)


def build(config: EngineConfig, options: WenetOptions) -> ModelRunner:
    from engine.models.wenet.runner import WenetRunner

    return WenetRunner.from_config(config, options)


def convert(ckpt_dir: str, checkpoint_name: str | None, out_dir: str) -> None:
    from engine.models.wenet.native import convert as convert_checkpoint

    convert_checkpoint(ckpt_dir, checkpoint_name, out_dir)


def describe(config: EngineConfig, options: WenetOptions) -> ModelInfo:
    from engine.models.wenet.info import describe as describe_config

    return describe_config(config, options)


FAMILY = ModelFamily(name="wenet", detect=detect, build=build, options=WenetOptions, describe=describe, convert=convert,
                     not_quantized="its runner computes in float only (no int8 layers to write ahead of time)",
                     hub_files=("train.yaml", "units.txt", "*.pt", "global_cmvn*", "oasr.json", "model.safetensors"))

__all__ = ["FAMILY", "WenetOptions", "build", "convert", "describe", "detect"]
