"""Cache-aware streaming (`chunked_limited`): NeMo's chunk schedule and the batched chunk step.

Schedule (NeMo's CacheAwareStreamingAudioBuffer with pad_and_drop_preencoded=False, for a
trained look-ahead [L, R] and subsampling factor f):
- the first chunk is 1 + f*R feature frames, alone (no pre-encode cache, nothing dropped);
- every later chunk is f*(R + 1) new frames preceded by the f + 1 frames before them (zeros
  where the stream is younger), and the first 1 + f // f = 2 subsampled frames are dropped;
- each chunk yields R + 1 encoder frames; a last chunk shorter than f new frames (1 for the
  first) is not run; the features include NeMo's final padding frame (engine/models/nemo/frontend.py).
Decisions depend on frame counts only, so how a client slices its audio cannot change them.

The attention cache of each stream is its last L encoder frames' keys and values, kept in the
paged block pool with one block per chunk (R + 1 frames; a trained fixed window pages by chunk,
seed 000 §6.1); the convolution caches live in `StateSlots`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.cache import BlockPool, BlockTable
from engine.models.nemo.config import EncoderConfig
from engine.models.nemo.encoder import ConformerEncoder
from engine.models.nemo.frontend import MelStream
from engine.models.nemo.state_slots import StateSlots

CONV_CACHE = "conv_cache"


@dataclass(frozen=True)
class StreamGeometry:
    """NeMo's CacheAwareStreamingConfig for one look-ahead [left, right] (encoder frames)."""

    left: int
    right: int
    factor: int

    @classmethod
    def of(cls, cfg: EncoderConfig, look_ahead: tuple[int, int]) -> StreamGeometry:
        return cls(look_ahead[0], look_ahead[1], cfg.subsampling_factor)

    @property
    def out_frames(self) -> int:
        """Encoder frames per chunk (R + 1): the attention chunk and the pool's block size."""
        return self.right + 1

    @property
    def first_chunk(self) -> int:
        return 1 + self.factor * self.right

    @property
    def chunk(self) -> int:
        return self.factor * (self.right + 1)

    @property
    def pre_cache(self) -> int:
        return self.factor + 1

    @property
    def drop(self) -> int:
        return 1 + (self.pre_cache - 1) // self.factor

    @property
    def num_left_chunks(self) -> int:
        return self.left // self.out_frames

    def chunk_ms(self, hop_ms: float) -> float:
        return self.out_frames * self.factor * hop_ms


@dataclass(eq=False)
class CacheAwareStream:
    """One stream's encoder-side state: features not yet consumed, its schedule and its caches."""

    mel: MelStream
    table: BlockTable
    slot: int
    feats: torch.Tensor
    """(F, n) feature frames from absolute index `feat_base` on (kept from `pre_cache` before
    `next_idx`, the pre-encode cache)."""
    feat_base: int = 0
    next_idx: int = 0
    steps: int = 0
    finished: bool = False
    """All features are in `feats` (end of input: padding frame included)."""

    @property
    def feats_end(self) -> int:
        return self.feat_base + self.feats.shape[1]

    def add_features(self, frames: torch.Tensor) -> None:
        if frames.shape[1]:
            self.feats = torch.cat((self.feats, frames.to(self.feats.dtype)), dim=1)

    def next_chunk(self, geo: StreamGeometry) -> int | None:
        """New feature frames the next step consumes, or None when it cannot run (yet)."""
        size = geo.first_chunk if self.steps == 0 else geo.chunk
        available = self.feats_end - self.next_idx
        if available >= size:
            return size
        if self.finished and available >= (1 if self.steps == 0 else geo.factor):
            return available
        return None

    def done(self, geo: StreamGeometry) -> bool:
        return self.finished and self.next_chunk(geo) is None

    def take_input(self, geo: StreamGeometry, size: int) -> torch.Tensor:
        """(F, n) the step's input (pre-encode cache + new frames), and advance the schedule."""
        chunk = self.feats[:, self.next_idx - self.feat_base : self.next_idx - self.feat_base + size]
        if self.steps > 0:
            start = max(self.next_idx - geo.pre_cache, 0)
            cache = self.feats[:, start - self.feat_base : self.next_idx - self.feat_base]
            zeros = torch.zeros(chunk.shape[0], geo.pre_cache - cache.shape[1], dtype=chunk.dtype)
            chunk = torch.cat((zeros, cache, chunk), dim=1)
        self.next_idx += size
        self.steps += 1
        keep_from = max(self.next_idx - geo.pre_cache, self.feat_base)
        self.feats = self.feats[:, keep_from - self.feat_base :]
        self.feat_base = keep_from
        return chunk


class CacheAwareEncoder:
    """Runs one chunk for a batch of streams through the encoder with their pooled caches."""

    def __init__(
        self, encoder: ConformerEncoder, geo: StreamGeometry, pool: BlockPool, slots: StateSlots
    ) -> None:
        self.encoder = encoder
        self.geo = geo
        self.pool = pool
        self.slots = slots

    def step(
        self, streams: list[CacheAwareStream], inputs: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """inputs: per stream (F, n) from `take_input` (already advanced). Returns the encoder
        output (B, T, D) and valid frames (B,); the streams' caches are updated."""
        enc = self.encoder
        device = next(enc.parameters()).device
        dtype = self.pool.spec.dtype
        groups: dict[bool, list[int]] = {}
        for i, s in enumerate(streams):
            groups.setdefault(s.steps == 1, []).append(i)  # steps was advanced: 1 = first chunk
        parts: dict[int, tuple[torch.Tensor, int]] = {}
        for first, rows in groups.items():
            x, lengths = _pad_features([inputs[i] for i in rows], device, dtype)
            sub, sub_len = enc.pre_encode(x, lengths)
            drop = 0 if first else self.geo.drop
            for j, i in enumerate(rows):
                n = max(int(sub_len[j]) - drop, 0)
                parts[i] = (sub[j, drop : drop + n], n)
        b = len(streams)
        t = max(max(n for _, n in parts.values()), 1)
        x = torch.zeros(b, t, enc.cfg.d_model, device=device, dtype=dtype)
        for i, (frames, n) in parts.items():
            x[i, :n] = frames
        lengths = torch.tensor([parts[i][1] for i in range(b)], device=device)
        window = self.geo.left
        cache_len, read_slots = self._context_slots(streams, window)
        write_slots, write_rows = [], []
        for i, s in enumerate(streams):
            n = parts[i][1]
            self._reserve(s.table, n)
            write_slots.append(s.table.slots(s.table.end, s.table.end + n))
            write_rows.append(torch.arange(n) + i * t)
            s.table.end += n
        read_idx = read_slots.to(device)
        write_idx = torch.cat(write_slots).to(device)
        rows_idx = torch.cat(write_rows).to(device)
        h, dk = self.pool.spec.num_heads, self.pool.spec.head_dim

        def read_kv(layer: int) -> tuple[torch.Tensor, torch.Tensor]:
            return self.pool.k[layer][read_idx], self.pool.v[layer][read_idx]

        def write_kv(layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.pool.k[layer].index_copy_(0, write_idx, k.reshape(b * t, h, dk)[rows_idx])
            self.pool.v[layer].index_copy_(0, write_idx, v.reshape(b * t, h, dk)[rows_idx])

        slot_idx = torch.tensor([s.slot for s in streams], device=device)
        conv = self.slots.gather(CONV_CACHE, slot_idx).transpose(0, 1).contiguous()  # (layers, B, D, k-1)
        out, lengths = enc.stream_step(x, lengths, cache_len.to(device), window, (self.geo.left, self.geo.right),
                                       read_kv, write_kv, conv)  # fmt: skip
        self.slots.scatter(CONV_CACHE, slot_idx, conv.transpose(0, 1))
        return out, lengths

    def _context_slots(
        self, streams: list[CacheAwareStream], window: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) cached frames per stream and (B, window) their pool slots, right-aligned like NeMo's
        cache (unfilled slots point at slot 0 and are masked)."""
        cache_len = torch.zeros(len(streams), dtype=torch.long)
        slots = torch.zeros(len(streams), window, dtype=torch.long)
        for i, s in enumerate(streams):
            table = s.table
            table.drop_before(table.end - window, self.pool)
            n = table.end - table.start
            if n:
                slots[i, window - n :] = table.slots(table.start, table.end)
            cache_len[i] = n
        return cache_len, slots

    def _reserve(self, table: BlockTable, frames: int) -> None:
        for _ in range(table.blocks_needed(frames)):
            block = self.pool.allocate()
            if block is None:  # admission reserves a stream's whole window, so this is a bug
                raise RuntimeError("KV pool exhausted mid-stream")
            table.blocks.append(block)


def _pad_features(
    inputs: list[torch.Tensor], device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """[(F, n_i)] -> (B, max n, F) right-padded, lengths (B,)."""
    longest = max(x.shape[1] for x in inputs)
    out = torch.zeros(len(inputs), longest, inputs[0].shape[0], device=device, dtype=dtype)
    for i, x in enumerate(inputs):
        out[i, : x.shape[1]] = x.T.to(device=device, dtype=dtype)
    return out, torch.tensor([x.shape[1] for x in inputs], device=device)
