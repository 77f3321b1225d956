"""The decoder's caller-owned K/V cache (see model.py): self-attention K/V per row, cross-
attention K/V per item (an audio window) shared by its rows (its beams). The runner's decode batch
grows it, reorders rows when beams move and compacts items when windows leave.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class CrossRun:
    """Consecutive items whose rows one cross-attention call serves: `items` and their `rows`,
    `per` rows each. `held` (offline items): every item of the run holds exactly that many own
    positions, and `silence` says whether its context goes on with the shared silence; the run's
    shapes and numbers are then an item's own, whatever else shares the batch. `held` None (live
    items): the run attends over its items' own positions and the shared silence in one batched
    softmax, masked per item."""

    items: slice
    rows: slice
    per: int
    held: int | None = None
    silence: bool = False
    length: int = 0
    """A batched run's own positions read per item: the most any of its items holds (the store
    may be longer: it keeps the positions of items that left)."""


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
    held: list[int] = field(default_factory=list)
    """Own positions of cross_k/v each item holds (the rest of its S is padding); empty: all S."""
    shares_silence: list[bool] = field(default_factory=list)
    """Whether each item's context goes on, after its held positions, with the shared silence
    below up to Whisper's 1500 positions ('fit' windows, context.py); empty: no item's."""
    batched: list[bool] = field(default_factory=list)
    """Whether each item attends in one batched call with its neighbours (live passes: the
    silence is read once for all of them, and rounding depends on the batch); else in calls of
    items of its own length only (offline: transcripts do not depend on the batch). Empty: none."""
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

    @property
    def cross_capacity(self) -> int:
        return self.cross_k[0].shape[2] if self.cross_k else 0

    def item_runs(self, batch_live: bool = True) -> list[CrossRun]:
        """Maximal runs of consecutive items one cross-attention call serves: equal rows per item,
        and either all batched or all holding the same positions. Without `batch_live`, live
        items attend in runs of their own length too (a prefill: the batched softmax would
        spell out scores for every prompt position over every silence position)."""
        runs: list[CrossRun] = []
        item = row = 0
        while item < len(self.item_rows):
            key = self._run_key(item, batch_live)
            end = item
            while end < len(self.item_rows) and self._run_key(end, batch_live) == key:
                end += 1
            per, batched, held, silence = key
            length = max(self.held[item:end]) if self.held else self.cross_capacity
            runs.append(CrossRun(slice(item, end), slice(row, row + per * (end - item)), per,
                                 None if batched else held, silence, length))
            row += per * (end - item)
            item = end
        return runs

    def _run_key(self, item: int, batch_live: bool) -> tuple[int, bool, int, bool]:
        batched = batch_live and bool(self.batched) and self.batched[item]
        if batched:
            return self.item_rows[item], True, -1, True
        held = self.held[item] if self.held else self.cross_capacity
        return self.item_rows[item], False, held, bool(self.shares_silence) and self.shares_silence[item]

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

    def reorder_rows(self, index: Tensor, length: int | None = None) -> None:
        """Beams moved within their items: row i's self-attention K/V become old row index[i]'s, in
        place, for the rows that moved and their first `length` positions (default: all). Positions
        past what any row has written are never read before the row writes them (its mask ends at
        its own position), so they need not move: a beam step copied every row's whole capacity,
        ~10x what the moved rows hold."""
        moved = (index != torch.arange(len(index), device=index.device)).nonzero()[:, 0]
        if moved.numel() == 0:
            return
        sources, end = index[moved], self.capacity if length is None else min(length, self.capacity)
        for store in (self.self_k, self.self_v):
            for t in store:
                t[moved, :, :end] = t[sources, :, :end]  # the right side is gathered first: no overlap

    def select_items(self, items: list[int]) -> None:
        """Keep items `items` (in that order) with all their rows, compacted in place: only the
        items whose place changes are copied (a long request's windows leave one by one, and
        copying every item's cross K/V, ~18 MB each, at each departure was an eighth of its
        decode time)."""
        starts = [0]
        for n in self.item_rows:
            starts.append(starts[-1] + n)
        rows = [r for i in items for r in range(starts[i], starts[i + 1])]
        for store, index in ((self.self_k, rows), (self.self_v, rows), (self.cross_k, items),
                             (self.cross_v, items)):
            for i, t in enumerate(store):
                store[i] = compact_leading(t, index)
        self.item_rows = [self.item_rows[i] for i in items]
        self.held = [self.held[i] for i in items] if self.held else []
        self.shares_silence = [self.shares_silence[i] for i in items] if self.shares_silence else []
        self.batched = [self.batched[i] for i in items] if self.batched else []

    def item_cache(self, item: int, rows: Tensor) -> DecoderCache:
        """A cache of item `item` alone, its rows `rows` (copies of their self-attention K/V)."""
        own = slice(item, item + 1)
        return DecoderCache(
            [t.index_select(0, rows) for t in self.self_k],
            [t.index_select(0, rows) for t in self.self_v],
            [t[own] for t in self.cross_k],
            [t[own] for t in self.cross_v],
            held=self.held[own],
            shares_silence=self.shares_silence[own],
            batched=self.batched[own],
            silence_k=self.silence_k,
            silence_v=self.silence_v,
            item_rows=[self.item_rows[item]],
        )

    def _spell_out(self, length: int) -> None:
        """Give every per-item list explicit values and grow cross storage to `length` positions
        (padding), ahead of joining another cache."""
        cap, g = self.cross_capacity, self.num_items
        self.held = self.held or [cap] * g
        self.shares_silence = self.shares_silence or [False] * g
        self.batched = self.batched or [False] * g
        if length > cap:
            for store in (self.cross_k, self.cross_v):
                for i, t in enumerate(store):
                    store[i] = F.pad(t, (0, 0, 0, length - cap))

    def extend(self, other: DecoderCache) -> None:
        """Append `other`'s items and rows (capacities are aligned first)."""
        cap = max(self.capacity, other.capacity)
        self.resize(cap)
        other.resize(cap)
        plain = not (self.held or other.held) and self.cross_capacity == other.cross_capacity
        if not plain:
            cross = max(self.cross_capacity, other.cross_capacity)
            self._spell_out(cross)
            other._spell_out(cross)
            self.held = [*self.held, *other.held]
            self.shares_silence = [*self.shares_silence, *other.shares_silence]
            self.batched = [*self.batched, *other.batched]
            self.silence_k = self.silence_k or other.silence_k
            self.silence_v = self.silence_v or other.silence_v
        for mine, theirs in (
            (self.self_k, other.self_k),
            (self.self_v, other.self_v),
            (self.cross_k, other.cross_k),
            (self.cross_v, other.cross_v),
        ):
            for i in range(len(mine)):
                mine[i] = append_leading(mine[i], theirs[i])
        self.item_rows = [*self.item_rows, *other.item_rows]


GROWTH = 1.25
"""Spare room a grown store keeps along its first dimension, as a share of what it holds."""


def append_leading(held: Tensor, extra: Tensor) -> Tensor:
    """`held` followed by `extra` along the first dimension. When `held` is the front of a
    buffer an earlier call grew with room to spare, only `extra` is copied (joining windows one
    at a time copied every item already held at each join); else a buffer GROWTH times the
    result's size is allocated. The result is the front of its buffer, which nothing else views."""
    n, m = held.shape[0], extra.shape[0]
    rows_in_storage = held.untyped_storage().nbytes() // max(extra[0].numel() * extra.element_size(), 1) if m else n
    if (n == 0 or n + m > rows_in_storage or held.shape[1:] != extra.shape[1:] or held.dtype != extra.dtype
            or not held.is_contiguous() or held.storage_offset() != 0):
        grown = extra.new_empty((int((n + m) * GROWTH) + 1, *extra.shape[1:]))
        if n:
            grown[:n] = held
        out = grown[: n + m]
    else:
        out = held.as_strided((n + m, *held.shape[1:]), held.stride())
    out[n:] = extra
    return out


def compact_leading(held: Tensor, keep: list[int]) -> Tensor:
    """The entries `keep` of `held` along its first dimension, as its first len(keep) entries,
    moved in place: only the entries whose place changes are copied."""
    moved = [j for j, i in enumerate(keep) if i != j]
    if moved:
        to = torch.tensor(moved, dtype=torch.long, device=held.device)
        held[to] = held.index_select(0, torch.tensor([keep[j] for j in moved], dtype=torch.long, device=held.device))
    return held[: len(keep)]


def own_storage(cache: DecoderCache) -> None:
    """Give `cache` buffers of its own, with room to grow: it compacts them in place (select_items),
    and its prefill's cross K/V may still be viewed by a job (its alignment pass)."""
    for store in (cache.self_k, cache.self_v, cache.cross_k, cache.cross_v):
        for i, t in enumerate(store):
            store[i] = append_leading(t[:0], t)
