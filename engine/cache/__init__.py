"""Paged streaming cache: a block pool shared by all streams and per-stream block tables."""

from engine.cache.block_pool import BlockPool, BlockTable, KVSpec, PoolPlan, plan_pool, pool_details

__all__ = ["BlockPool", "BlockTable", "KVSpec", "PoolPlan", "plan_pool", "pool_details"]
