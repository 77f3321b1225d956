"""Decoder rows' block tables over the engine's KV pool, with blocks shared between rows.

A request's beams share its prompt's blocks (and, after a beam step, the history two beams have
in common): blocks carry a reference count, a fork copies a table and counts its blocks once
more, and a row about to write into a shared block copies that block first (copy-on-write), so
a beam step moves no K/V at all except the one partly filled block a fork left shared.
Owned by the engine thread, like the pool.
"""

from __future__ import annotations

import math

import torch

from engine.cache import BlockPool


class SharedBlocks:
    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.block_size = pool.block_size
        self.refs = [0] * pool.num_blocks

    @property
    def used(self) -> int:
        return self.pool.num_blocks - self.pool.num_free

    def blocks_for(self, positions: int) -> int:
        return math.ceil(positions / self.block_size)

    def allocate(self, positions: int) -> list[int] | None:
        """A new table covering `positions` positions, or None (nothing taken) when the pool is short."""
        n = self.blocks_for(positions)
        if self.pool.num_free < n:
            return None
        table = [self._take() for _ in range(n)]
        return table

    def _take(self) -> int:
        block = self.pool.allocate()
        assert block is not None  # callers check num_free first
        self.refs[block] = 1
        return block

    def fork(self, table: list[int]) -> list[int]:
        for b in table:
            self.refs[b] += 1
        return list(table)

    def release(self, table: list[int]) -> None:
        freed = []
        for b in table:
            self.refs[b] -= 1
            if self.refs[b] == 0:
                freed.append(b)
        if freed:
            self.pool.free(freed)

    def blocks_to_write(self, table: list[int], position: int) -> int:
        """New blocks writing `position` into `table` needs (0 or 1)."""
        index = position // self.block_size
        return 1 if index >= len(table) or self.refs[table[index]] > 1 else 0

    def make_writable(self, table: list[int], position: int) -> int:
        """Ensure `table` may write `position` (append a block, or copy a shared one); its slot.
        The caller has checked `blocks_to_write` against the pool's free blocks."""
        index = position // self.block_size
        if index >= len(table):
            table.append(self._take())
        elif self.refs[table[index]] > 1:
            old, new = table[index], self._take()
            size = self.block_size
            for store in (self.pool.k, self.pool.v):  # (layers, slots, heads, dim)
                store[:, new * size : (new + 1) * size] = store[:, old * size : (old + 1) * size]
            self.refs[old] -= 1
            table[index] = new
        return table[index] * self.block_size + position % self.block_size

    def slots(self, table: list[int], count: int) -> torch.Tensor:
        """Slots of positions 0..count-1 of `table` (long, CPU)."""
        pos = torch.arange(count)
        blocks = torch.tensor(table, dtype=torch.long)
        return blocks[pos // self.block_size] * self.block_size + pos % self.block_size
