"""A pool of fixed-size KV blocks shared by every live stream, and the per-stream block table.

Storage is one K and one V tensor per pool, `(layers, num_blocks * block_size, heads, head_dim)`:
a block is `block_size` consecutive frame slots, so a frame's slot is
`block_id * block_size + offset` and a stream's history is gathered with one index tensor.
The engine thread owns the pool; nothing here takes a lock.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import torch

from engine.errors import InvalidRequestError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KVSpec:
    """Shape of what one frame stores: K and V of every layer."""

    num_layers: int
    num_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_frame(self) -> int:
        elem = torch.empty(0, dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_heads * self.head_dim * elem  # 2 = K and V


def plan_num_blocks(
    spec: KVSpec,
    block_size: int,
    min_blocks: int,
    *,
    max_num_blocks: int | None,
    device: torch.device,
    gpu_memory_utilization: float,
    cpu_cache_bytes: int,
) -> int:
    """How many blocks the pool gets: `max_num_blocks`, else a memory budget divided by the
    block size in bytes. The arithmetic is logged; fails naming the levers when fewer than
    `min_blocks` (one stream's working set) fit."""
    block_bytes = spec.bytes_per_frame * block_size
    if max_num_blocks is not None:
        num_blocks = max_num_blocks
        logger.info(
            "KV pool: max_num_blocks=%d x %d B/block (%d frames x %d B/frame) = %.1f MiB",
            num_blocks, block_bytes, block_size, spec.bytes_per_frame, num_blocks * block_bytes / 2**20,
        )  # fmt: skip
    else:
        if device.type == "cuda":
            free, _total = torch.cuda.mem_get_info(device)
            budget = int(free * gpu_memory_utilization)
            source = f"gpu_memory_utilization={gpu_memory_utilization} x {free / 2**20:.0f} MiB free"
        else:
            budget = cpu_cache_bytes
            source = f"cpu_cache_bytes={cpu_cache_bytes}"
        num_blocks = budget // block_bytes
        logger.info(
            "KV pool: %s -> %d B budget / %d B per block (%d frames x %d B/frame: 2 x %d layers x %d heads "
            "x %d dims x %s) = %d blocks",
            source, budget, block_bytes, block_size, spec.bytes_per_frame, spec.num_layers, spec.num_heads,
            spec.head_dim, spec.dtype, num_blocks,
        )  # fmt: skip
    if num_blocks < min_blocks:
        raise InvalidRequestError(
            f"KV pool of {num_blocks} blocks cannot hold one stream ({min_blocks} blocks of {block_bytes} B); "
            "raise max_num_blocks, cpu_cache_bytes or gpu_memory_utilization, or lower chunk_size, "
            "num_left_chunks or block_size_frames"
        )
    return num_blocks


class BlockPool:
    """Fixed-size KV blocks and their free list."""

    def __init__(self, spec: KVSpec, num_blocks: int, block_size: int, device: torch.device) -> None:
        self.spec = spec
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (spec.num_layers, num_blocks * block_size, spec.num_heads, spec.head_dim)
        self.k = torch.zeros(shape, dtype=spec.dtype, device=device)
        self.v = torch.zeros(shape, dtype=spec.dtype, device=device)
        # LIFO free list: recently freed blocks are reused first (warm in cache).
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, in [0, 1]."""
        return 1.0 - len(self._free) / self.num_blocks

    def allocate(self) -> int | None:
        """One free block id, or None when the pool is exhausted."""
        return self._free.pop() if self._free else None

    def free(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))

    def free_ids(self) -> set[int]:
        """The free block ids (for hygiene checks)."""
        return set(self._free)


@dataclass
class BlockTable:
    """One stream's blocks. Frames `[start, end)` (absolute encoder positions) are readable;
    frame p lives in `blocks[(p - base) // block_size]` at offset `(p - base) % block_size`."""

    block_size: int
    blocks: list[int] = field(default_factory=list)
    base: int = 0
    """Absolute position of the first slot of blocks[0]."""
    start: int = 0
    """First readable position (>= base); earlier frames were dropped."""
    end: int = 0
    """Next position to write = frames written so far."""

    @property
    def capacity_end(self) -> int:
        return self.base + len(self.blocks) * self.block_size

    def blocks_needed(self, num_frames: int) -> int:
        """New blocks required to write `num_frames` more frames."""
        return max(0, math.ceil((self.end + num_frames - self.capacity_end) / self.block_size))

    def drop_before(self, pos: int, pool: BlockPool) -> None:
        """Make frames before `pos` unreadable and free every block wholly before it."""
        self.start = max(self.start, min(pos, self.end))
        n = max(0, (self.start - self.base) // self.block_size)
        if n:
            pool.free(self.blocks[:n])
            del self.blocks[:n]
            self.base += n * self.block_size

    def droppable_blocks(self) -> int:
        """Blocks wholly before `end` (safe to recycle without losing the frame being written)."""
        return max(0, (self.end - self.base) // self.block_size)

    def slots(self, first: int, last: int) -> torch.Tensor:
        """Slot index of each position in [first, last) (long, CPU)."""
        pos = torch.arange(first - self.base, last - self.base)
        table = torch.tensor(self.blocks, dtype=torch.long)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def release(self, pool: BlockPool) -> None:
        pool.free(self.blocks)
        self.blocks = []
        self.base = self.start = self.end
