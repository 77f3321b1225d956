"""NVIDIA NeMo FastConformer checkpoints (`.nemo`): RNN-T, TDT, CTC and hybrid RNNT+CTC, offline,
cache-aware streaming (`chunked_limited`) and buffered streaming (`chunked_limited_with_rc`).

The archive is read with tarfile/yaml/torch/sentencepiece; no NeMo at run time. A checkpoint
directory holds a `.nemo` file (`EngineConfig.checkpoint_name` picks one of several);
`EngineConfig.decode_method` picks the head of a hybrid ('rnnt' | 'ctc'); the cache-aware
look-ahead is chosen with `chunk_size` / `num_left_chunks`; family options are `NemoOptions`
(engine/models/nemo/options.py). Heavy modules load only when a runner is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.config import EngineConfig
from engine.families import ModelFamily
from engine.models.nemo.options import NemoOptions
from engine.runner import ModelInfo

if TYPE_CHECKING:
    from engine.models.nemo.runner import NemoRunner


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    from engine.models.nemo.checkpoint import detect as detect_nemo

    return detect_nemo(ckpt_dir, checkpoint_name)


def convert(ckpt_dir: str, checkpoint_name: str | None, out_dir: str) -> None:
    from engine.models.nemo.native import convert as unpack

    unpack(ckpt_dir, checkpoint_name, out_dir)


def build(config: EngineConfig, options: NemoOptions) -> NemoRunner:
    from engine.models.nemo.runner import NemoRunner

    return NemoRunner.from_config(config, options)


def describe(config: EngineConfig, options: NemoOptions) -> ModelInfo:
    from engine.models.nemo.info import describe as describe_config

    return describe_config(config, options)


FAMILY = ModelFamily(name="nemo", detect=detect, build=build, options=NemoOptions, convert=convert,
                     not_quantized="its runner computes in float only (no int8 layers to write ahead of time)",
                     describe=describe, hub_files=("*.nemo",))

__all__ = ["FAMILY", "NemoOptions", "build", "convert", "describe", "detect"]
