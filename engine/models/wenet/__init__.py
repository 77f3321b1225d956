"""WeNet U2/U2++ chunked Conformer-CTC: cache-aware streaming over a paged KV pool.

Importing this package registers the `wenet` family (checkpoint dirs with train.yaml, a .pt
state dict and units.txt).

Family knobs in `EngineConfig.extra`:
- `wenet_ctc_weight` (float, default 0.5): weight of the CTC score in attention rescoring, which
  reorders the final n-best of beam-search requests when the checkpoint has a decoder.
- `wenet_keyword_boost` (float, default 3.0): bonus per matched token of a request's keywords
  in the CTC beam search (engine/ops/context_biasing.py; docs/kernels.md).

Runner counters for metrics: `WenetRunner.stats()` -> kv_exhausted_total, kv_recycled_blocks_total,
kv_blocks_total, kv_blocks_free, kv_pool_usage, streams.
"""

from __future__ import annotations

from engine.config import EngineConfig
from engine.models.wenet.checkpoint import detect, load_checkpoint
from engine.models.wenet.runner import WenetRunner
from engine.registry import ModelFamily, register


def build(config: EngineConfig) -> WenetRunner:
    return WenetRunner.from_config(config)


FAMILY = register(ModelFamily(name="wenet", detect=detect, build=build))

__all__ = ["FAMILY", "WenetRunner", "build", "detect", "load_checkpoint"]
