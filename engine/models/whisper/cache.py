"""The decoder's caller-owned K/V cache (see model.py): self-attention K/V per row, cross-
attention K/V per item (an audio window) shared by its rows (its beams). The runner's decode batch
grows it, reorders rows when beams move and compacts items when windows leave.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class DecoderCache:
    """K/V of every decoder row: self-attention grows by one position per step, cross-attention
    is computed once per audio window. Rows are (request × beam), their self-attention K/V one
    per row; cross-attention K/V are one per item (an audio window), shared by its
    `item_rows[i]` consecutive rows (its beams): a beam never moves to another item's audio, and
    reading an item's K/V once for all its beams is what makes a beam step cheap."""

    self_k: list[Tensor]  # per layer (N, H, T_cap, Dh)
    self_v: list[Tensor]
    cross_k: list[Tensor]  # per layer (G, H, S, Dh)
    cross_v: list[Tensor]
    cross_len: Tensor | None = None
    """(G,) audio positions of each item held in cross_k/v; the rest of an item's context, up to
    Whisper's 1500 positions, is the shared encoded silence below ('fit' windows, context.py).
    None: every item's context is all of cross_k/v."""
    silence_k: list[Tensor] | None = None  # per layer (H, n_audio_ctx, Dh), shared by all rows
    silence_v: list[Tensor] | None = None
    item_rows: list[int] = field(default_factory=list)
    """Rows of each item, in row order (sums to num_rows); empty: one row per item."""

    def __post_init__(self) -> None:
        if not self.item_rows:
            self.item_rows = [1] * self.num_items

    @property
    def num_rows(self) -> int:
        return self.self_k[0].shape[0] if self.self_k else 0

    @property
    def num_items(self) -> int:
        return self.cross_k[0].shape[0] if self.cross_k else 0

    @property
    def capacity(self) -> int:
        return self.self_k[0].shape[2] if self.self_k else 0

    def item_runs(self) -> list[tuple[slice, slice, int]]:
        """Maximal runs of consecutive items with the same number of rows: (items, their rows,
        rows per item). One cross-attention call serves a run."""
        runs: list[tuple[slice, slice, int]] = []
        item = row = 0
        while item < len(self.item_rows):
            per = self.item_rows[item]
            end = item
            while end < len(self.item_rows) and self.item_rows[end] == per:
                end += 1
            runs.append((slice(item, end), slice(row, row + per * (end - item)), per))
            row += per * (end - item)
            item = end
        return runs

    def ensure_capacity(self, needed: int) -> None:
        """Grow self-attention storage geometrically so growth is amortized."""
        if needed > self.capacity:
            self.resize(max(needed, 2 * self.capacity, 16))

    def resize(self, new_cap: int) -> None:
        cap = self.capacity
        if new_cap == cap:
            return
        if new_cap < cap:
            for store in (self.self_k, self.self_v):
                for i, t in enumerate(store):
                    store[i] = t[:, :, :new_cap].contiguous()
            return
        for store in (self.self_k, self.self_v):
            for i, t in enumerate(store):
                grown = t.new_zeros(t.shape[0], t.shape[1], new_cap, t.shape[3])
                grown[:, :, :cap] = t
                store[i] = grown

    @property
    def cross_capacity(self) -> int:
        return self.cross_k[0].shape[2] if self.cross_k else 0

    def reorder_rows(self, index: Tensor) -> None:
        """Beams moved within their items: row i's self-attention K/V become old row index[i]'s."""
        for store in (self.self_k, self.self_v):
            for i, t in enumerate(store):
                store[i] = t.index_select(0, index)

    def select_items(self, items: list[int]) -> None:
        """Keep items `items` (in that order) with all their rows."""
        starts = [0]
        for n in self.item_rows:
            starts.append(starts[-1] + n)
        rows = [r for i in items for r in range(starts[i], starts[i + 1])]
        device = self.cross_k[0].device if self.cross_k else None
        item_index = torch.tensor(items, dtype=torch.long, device=device)
        row_index = torch.tensor(rows, dtype=torch.long, device=device)
        for store, index in ((self.self_k, row_index), (self.self_v, row_index), (self.cross_k, item_index),
                             (self.cross_v, item_index)):
            for i, t in enumerate(store):
                store[i] = t.index_select(0, index)
        self.item_rows = [self.item_rows[i] for i in items]
        if self.cross_len is not None:
            self.cross_len = self.cross_len.index_select(0, item_index)
            self.shrink_cross()

    def shrink_cross(self) -> None:
        """Drop cross positions no item holds (items with long contexts left the batch)."""
        if self.cross_len is None or not self.cross_k or self.cross_k[0].shape[0] == 0:
            return
        needed = int(self.cross_len.max())
        if needed < self.cross_capacity:
            for store in (self.cross_k, self.cross_v):
                for i, t in enumerate(store):
                    store[i] = t[:, :, :needed].contiguous()

    def pad_cross(self, length: int) -> None:
        """Grow cross storage to `length` positions, masked by `cross_len` (items without one get
        their full current length)."""
        cap = self.cross_capacity
        if self.cross_len is None:
            self.cross_len = torch.full((self.num_items,), cap, dtype=torch.long, device=self.cross_k[0].device)
        if length <= cap:
            return
        for store in (self.cross_k, self.cross_v):
            for i, t in enumerate(store):
                store[i] = F.pad(t, (0, 0, 0, length - cap))

    def extend(self, other: DecoderCache) -> None:
        """Append `other`'s items and rows (capacities are aligned first)."""
        cap = max(self.capacity, other.capacity)
        self.resize(cap)
        other.resize(cap)
        if self.cross_len is not None or other.cross_len is not None or self.cross_capacity != other.cross_capacity:
            cross = max(self.cross_capacity, other.cross_capacity)
            self.pad_cross(cross)
            other.pad_cross(cross)
            assert self.cross_len is not None and other.cross_len is not None
            self.cross_len = torch.cat([self.cross_len, other.cross_len])
            self.silence_k = self.silence_k or other.silence_k
            self.silence_v = self.silence_v or other.silence_v
        for mine, theirs in (
            (self.self_k, other.self_k),
            (self.self_v, other.self_v),
            (self.cross_k, other.cross_k),
            (self.cross_v, other.cross_v),
        ):
            for i in range(len(mine)):
                mine[i] = torch.cat([mine[i], theirs[i]], dim=0)
        self.item_rows = [*self.item_rows, *other.item_rows]
