"""Paged streaming cache: a block pool shared by all streams and per-stream block tables."""

from engine.cache.block_pool import BlockPool, BlockTable, KVSpec, plan_num_blocks

__all__ = ["BlockPool", "BlockTable", "KVSpec", "plan_num_blocks"]
