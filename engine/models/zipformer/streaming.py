"""Chunked streaming: the chunk geometry and every stream's encoder state in preallocated slots.

Geometry (icefall's streaming_decode): a step consumes 2c + 13 feature frames (100 Hz) and
advances by 2c: the subsampler turns them into c + 3 frames at 50 Hz, the last 3 being its
ConvNeXt's look-ahead; the stacks run on c frames with `left` frames of cached left context
(left/ds at a stack's rate); c/2 encoder frames (25 Hz) come out. At the end of input the
features are extended with 43 frames of log(1e-10) (13 of look-ahead and icefall's 30 of tail
padding) and chunks run until the read position passes them.

State per stream, one row of each slot tensor (seed 003's slot-based cache): for every stack,
(layers, left/ds, dim) rows for the attention keys, the nonlinear-attention values and both
attention values, (layers, dim, kernel//2) for both convolution tails; the subsampler's
(128, 3, 19) ConvNeXt tail; and how many 50 Hz frames the stream has seen (its cache is valid
that far back). All of it is a fixed-size rolling window per stream, so one row per stream is
the whole allocation: a paged pool would add a block table to every read of a window that never
grows (seed 003 keeps NeMo's fixed-size caches in slots for the same reason).
"""

from __future__ import annotations

import torch

from engine.models.zipformer.config import CONVNEXT_PAD, EMBED_CHANNELS, ZipformerConfig
from engine.models.zipformer.encoder import LayerCache
from engine.models.zipformer.geometry import StreamGeometry


class CacheSlots:
    """Every stream's encoder state, one row per slot; the engine thread owns it (no locks)."""

    def __init__(self, cfg: ZipformerConfig, geo: StreamGeometry, num_slots: int, dtype: torch.dtype,
                 device: torch.device) -> None:  # fmt: skip
        self.num_slots = num_slots
        self.stacks: list[dict[str, torch.Tensor]] = []
        for i in range(cfg.num_stacks):
            n, d, h = cfg.num_encoder_layers[i], cfg.encoder_dim[i], cfg.num_heads[i]
            left = geo.left // cfg.downsampling_factor[i]
            conv = cfg.cnn_module_kernel[i] // 2

            def z(*shape: int) -> torch.Tensor:
                return torch.zeros((num_slots, *shape), dtype=dtype, device=device)

            self.stacks.append({
                "key": z(n, left, h * cfg.query_head_dim[i]), "nonlin": z(n, left, 3 * d // 4),
                "val1": z(n, left, h * cfg.value_head_dim[i]), "val2": z(n, left, h * cfg.value_head_dim[i]),
                "conv1": z(n, d, conv), "conv2": z(n, d, conv),
            })  # fmt: skip
        width = ((cfg.feature_dim - 1) // 2 - 1) // 2
        self.embed = torch.zeros((num_slots, EMBED_CHANNELS, CONVNEXT_PAD, width), dtype=dtype, device=device)
        self.processed = torch.zeros(num_slots, dtype=torch.long, device=device)
        self._free = list(range(num_slots - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int | None:
        return self._free.pop() if self._free else None

    def free(self, slot: int) -> None:
        for stack in self.stacks:
            for t in stack.values():
                t[slot].zero_()
        self.embed[slot].zero_()
        self.processed[slot] = 0
        self._free.append(slot)

    def bytes_per_stream(self) -> int:
        per = sum(t[0].numel() * t.element_size() for s in self.stacks for t in s.values())
        return per + self.embed[0].numel() * self.embed.element_size()

    def gather(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[list[LayerCache]]]:
        """The rows of `slots`: embed (B, 128, 3, W), processed (B,), per stack per layer caches."""
        caches = []
        for stack in self.stacks:
            rows = {k: t.index_select(0, slots) for k, t in stack.items()}  # (B, layers, ...)
            n = rows["key"].shape[1]
            caches.append([LayerCache(**{k: v[:, j] for k, v in rows.items()}) for j in range(n)])
        return self.embed.index_select(0, slots), self.processed.index_select(0, slots), caches

    def scatter(self, slots: torch.Tensor, embed: torch.Tensor, processed: torch.Tensor,
                caches: list[list[LayerCache]]) -> None:  # fmt: skip
        self.embed.index_copy_(0, slots, embed)
        self.processed.index_copy_(0, slots, processed)
        for stack, layers in zip(self.stacks, caches, strict=True):
            for k, t in stack.items():
                t.index_copy_(0, slots, torch.stack([getattr(c, k) for c in layers], dim=1))
