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

from engine.errors import EngineOverloadedError, InvalidRequestError
from engine.memory import MIB, device_memory

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


ACTIVATION_RESERVE_FLOOR = 256 * MIB
"""Memory kept free for the forward passes' activations when a pool is derived (§6.1's floor)."""


@dataclass(frozen=True)
class PoolPlan:
    """How many blocks a pool gets, and the arithmetic that chose it (logged, and in /v1/models)."""

    num_blocks: int
    block_bytes: int
    ceiling: int
    """What `sequences` streams can use: sequences x blocks per sequence; a derived pool stops there."""
    derivation: str

    @property
    def bytes(self) -> int:
        return self.num_blocks * self.block_bytes


def plan_pool(
    spec: KVSpec,
    block_size: int,
    *,
    min_blocks: int,
    blocks_per_seq: int,
    sequences: int,
    max_num_blocks: int | None,
    device: torch.device,
    gpu_memory_utilization: float,
    cpu_cache_bytes: int,
) -> PoolPlan:
    """The pool's blocks (reference design §6.1). `max_num_blocks` when set; else derived from the
    device's memory read after the model is on it (engine/memory.py):

        available = total x gpu_memory_utilization - resident - activation_reserve

    or, on a device with nothing to measure (the CPU), the `cpu_cache_bytes` budget; divided by
    the bytes of a block and capped at `sequences x blocks_per_seq`, what the engine can ever use.
    Fewer than `min_blocks` (one stream's working set): InvalidRequestError naming the levers when
    the configuration chose the size, EngineOverloadedError when the device is full (another model
    or process holds it: retry once it is freed)."""
    block_bytes = spec.bytes_per_frame * block_size
    ceiling = sequences * blocks_per_seq
    shape = (f"{block_bytes} B/block ({block_size} frames x {spec.bytes_per_frame} B/frame: 2 x {spec.num_layers} "
             f"layers x {spec.num_heads} heads x {spec.head_dim} dims x {spec.dtype})")
    memory = None if max_num_blocks is not None else device_memory(device)
    if max_num_blocks is not None:
        num_blocks = max_num_blocks
        derivation = f"max_num_blocks={num_blocks} x {shape} = {num_blocks * block_bytes / MIB:.1f} MiB"
    elif memory is None:
        num_blocks = min(cpu_cache_bytes // block_bytes, ceiling)
        derivation = (f"cpu_cache_bytes={cpu_cache_bytes} / {shape}, cap={ceiling} ({sequences} sequences x "
                      f"{blocks_per_seq} blocks) = {num_blocks} blocks")
    else:
        reserve = ACTIVATION_RESERVE_FLOOR
        available = int(memory.total_bytes * gpu_memory_utilization) - memory.resident_bytes - reserve
        num_blocks = min(max(available, 0) // block_bytes, ceiling)
        derivation = (f"paged KV pool derived from {device} memory: total={memory.total_bytes / MIB:.0f} MiB x "
                      f"gpu_memory_utilization={gpu_memory_utilization} resident={memory.resident_bytes / MIB:.0f} "
                      f"MiB activation_reserve={reserve / MIB:.0f} MiB -> available={available / MIB:.0f} MiB / "
                      f"{shape}, cap={ceiling} ({sequences} sequences x {blocks_per_seq} blocks) = {num_blocks} blocks")
    logger.info("KV pool: %s", derivation)
    if num_blocks < min_blocks:
        message = f"KV pool of {num_blocks} blocks cannot hold one stream ({min_blocks} blocks of {block_bytes} B)"
        if memory is not None:
            raise EngineOverloadedError(
                f"{message}: the device's memory is taken ({derivation}); free it (unload a model), raise "
                "gpu_memory_utilization, or lower max_batch_size, chunk_size or num_left_chunks")
        raise InvalidRequestError(
            f"{message}; raise max_num_blocks, cpu_cache_bytes or gpu_memory_utilization, or lower chunk_size, "
            "num_left_chunks or block_size_frames")
    return PoolPlan(num_blocks, block_bytes, ceiling, derivation)


POOL_DETAILS = ("kv_blocks", "kv_blocks_cap", "kv_block_bytes", "kv_pool_bytes")
"""The keys `pool_details` adds: known at load only, so a model described before it lacks them."""


def pool_details(plan: PoolPlan) -> dict[str, int | float]:
    """A planned pool as /v1/models shows it (a model's `info.details`), and as the model pool
    counts it beside the weights."""
    return dict(zip(POOL_DETAILS, (plan.num_blocks, plan.ceiling, plan.block_bytes, plan.bytes), strict=True))


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
