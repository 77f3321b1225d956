"""icefall Zipformer2 transducers (egs/librispeech/ASR/zipformer): offline and chunked streaming,
greedy decoding, loaded from `pretrained.pt` / `epoch-N.pt` + `model_args.json` + `bpe.model` or
`tokens.txt` (see checkpoint.py); no icefall or k2 at run time.

The streaming chunk is chosen with `EngineConfig.chunk_size` / `num_left_chunks` among the
checkpoint's trained values (options.py); family options are `ZipformerOptions`. Heavy modules
load only when a runner is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.config import EngineConfig
from engine.families import ModelFamily
from engine.models.zipformer.options import ZipformerOptions
from engine.runner import ModelInfo

if TYPE_CHECKING:
    from engine.models.zipformer.runner import ZipformerRunner


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    from engine.models.zipformer.files import detect as detect_icefall

    return detect_icefall(ckpt_dir, checkpoint_name)


def build(config: EngineConfig, options: ZipformerOptions) -> ZipformerRunner:
    from engine.models.zipformer.runner import ZipformerRunner

    return ZipformerRunner.from_config(config, options)


def describe(config: EngineConfig, options: ZipformerOptions) -> ModelInfo:
    from engine.models.zipformer.info import describe as describe_config

    return describe_config(config, options)


FAMILY = ModelFamily(name="zipformer", detect=detect, build=build, options=ZipformerOptions, describe=describe,
                     not_converted="icefall's pretrained.pt / epoch-N.pt is one state dict the loader reads as it is: nothing to unpack or fold",
                     not_quantized="its runner computes in float only (no int8 layers to write ahead of time)",
                     hub_files=("model_args.json", "*.pt", "*.pth", "bpe.model", "tokens.txt"))

__all__ = ["FAMILY", "ZipformerOptions", "build", "describe", "detect"]
