"""NVIDIA NeMo FastConformer checkpoints (`.nemo`): RNN-T, TDT, CTC and hybrid RNNT+CTC, offline,
cache-aware streaming (`chunked_limited`) and buffered streaming (`chunked_limited_with_rc`).

The archive is read with tarfile/yaml/torch/sentencepiece; no NeMo at run time. Importing this
package registers the `nemo` family (a checkpoint directory holding a `.nemo` file). Heavy
modules load only when a runner is built.

Engine options (until EngineConfig carries family options, through `EngineConfig.extra`):
- `checkpoint_name`: the `.nemo` file inside ckpt_dir (needed when it holds several);
- `nemo_decode_method` ('rnnt' | 'ctc'): which head of a hybrid decodes;
- `nemo_stream_context` ((L, C, R) encoder frames): buffered streaming default window;
- `nemo_max_streams` (int, 256): live streams at once.
The cache-aware look-ahead is chosen with `chunk_size` / `num_left_chunks` (engine/models/nemo/options.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.config import EngineConfig
from engine.registry import ModelFamily, register

if TYPE_CHECKING:
    from engine.models.nemo.runner import NemoRunner


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    from engine.models.nemo.checkpoint import detect as detect_nemo

    return detect_nemo(ckpt_dir, checkpoint_name)


def build(config: EngineConfig) -> NemoRunner:
    from engine.models.nemo.runner import NemoRunner

    return NemoRunner.from_config(config)


FAMILY = register(ModelFamily(name="nemo", detect=detect, build=build))

__all__ = ["FAMILY", "build", "detect"]
