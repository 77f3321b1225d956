"""NeMo's ConformerEncoder: subsampling, x-scaling, relative positions, Conformer blocks, masks.

Two forwards over the same weights:
- `forward`: whole inputs (offline requests and buffered-streaming windows) under the model's
  attention mask: full, `chunked_limited` [left, right] or a window-relative
  `chunked_limited_with_rc` [left, chunk, right] per row;
- `stream_step`: one cache-aware chunk for a batch of streams; the keys/values of each stream's
  last `left` frames come in per layer (from the paged pool) and the chunk's go out, with the
  convolution caches. This is NeMo's `forward_internal` with `cache_last_channel`, where the
  cache holds projected K/V instead of the layer inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from engine.models.nemo.attention import relative_positions
from engine.models.nemo.config import EncoderConfig
from engine.models.nemo.conformer import ConformerLayer
from engine.models.nemo.subsampling import ConvSubsampling

KVReader = Callable[[int], tuple[torch.Tensor, torch.Tensor]]
"""layer -> K, V (B, cache, H, d_k) of the streams' cached frames."""
KVWriter = Callable[[int, torch.Tensor, torch.Tensor], None]
"""(layer, K, V (B, T, H, d_k)) of the chunk just encoded."""


def chunked_limited_mask(size: int, context: Sequence[int], device: torch.device) -> torch.Tensor:
    """(size, size) bool, True = visible: chunks of right + 1 frames, each seeing its own chunk and
    left // (right + 1) chunks before (NeMo's 'chunked_limited'; [-1, -1] = everything)."""
    left, right = context[0], context[1]
    visible = torch.ones(size, size, dtype=torch.bool, device=device)
    if right == -1:
        return visible.triu(diagonal=-left) if left >= 0 else visible
    chunk = right + 1
    left_chunks = left // chunk if left >= 0 else 10000
    idx = torch.div(torch.arange(size, device=device), chunk, rounding_mode="trunc")
    diff = idx.unsqueeze(1) - idx.unsqueeze(0)
    return (diff <= left_chunks) & (diff >= 0)


def rc_window_mask(size: int, context: Sequence[int], device: torch.device) -> torch.Tensor:
    """(size, size) bool: NeMo's 'chunked_limited_with_rc' window mask for [left, chunk, right]
    frames. The chunk grid starts at frame 0 of the input (not re-aligned to the left context)."""
    left, chunk, right = context
    frame = torch.arange(size, device=device)
    chunk_idx = torch.div(frame, chunk, rounding_mode="trunc")
    start = torch.clamp(chunk_idx * chunk - left, min=0)
    end = torch.clamp(chunk_idx * chunk + chunk - 1 + right, max=size - 1)
    j = frame.unsqueeze(0)
    return (j >= start.unsqueeze(1)) & (j <= end.unsqueeze(1))


class ConformerEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.pre_encode = ConvSubsampling(
            cfg.subsampling, cfg.subsampling_factor, cfg.feat_in, cfg.d_model,
            cfg.subsampling_conv_channels, cfg.causal_downsampling,
        )  # fmt: skip
        self.layers = nn.ModuleList(ConformerLayer(cfg) for _ in range(cfg.n_layers))
        self.xscale = math.sqrt(cfg.d_model) if cfg.xscaling else None

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.xscale if self.xscale is not None else x

    def forward(
        self, mel: torch.Tensor, lengths: torch.Tensor, contexts: Sequence[Sequence[int]] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mel (B, F, T), lengths (B,) -> (B, T', D), (B,). `contexts`: one attention context per
        row ([left, right] for chunked_limited, [left, chunk, right] for chunked_limited_with_rc);
        None attends over everything (or the model's first trained look-ahead when it has one)."""
        x, lengths = self.pre_encode(mel.transpose(1, 2), lengths)
        b, t, _ = x.shape
        x = self._embed(x)
        pos_emb = relative_positions(t, self.cfg.d_model, x.device, x.dtype)
        valid = torch.arange(t, device=x.device)[None, :] < lengths[:, None]  # (B, T)
        att = self._attention_mask(t, b, contexts, x.device) & valid[:, None, :] & valid[:, :, None]
        att_mask, pad_mask = ~att, ~valid
        for layer in self.layers:
            x, _, _, _ = layer(x, pos_emb, att_mask, pad_mask)
        return x, lengths

    def _attention_mask(
        self, t: int, b: int, contexts: Sequence[Sequence[int]] | None, device: torch.device
    ) -> torch.Tensor:
        style = self.cfg.att_context_style
        if contexts is None:
            default = self.cfg.att_context_sizes[0]
            contexts = [default] * b
        masks = {}
        rows = []
        for ctx in contexts:
            key = tuple(ctx)
            if key not in masks:
                if style == "chunked_limited_with_rc" and sum(key) != -3:
                    masks[key] = rc_window_mask(t, key, device)
                elif style == "chunked_limited":
                    masks[key] = chunked_limited_mask(t, key, device)
                elif style == "regular":
                    visible = torch.ones(t, t, dtype=torch.bool, device=device)
                    if key[0] >= 0:
                        visible = visible.triu(diagonal=-key[0])
                    if key[1] >= 0:
                        visible = visible.tril(diagonal=key[1])
                    masks[key] = visible
                else:
                    masks[key] = torch.ones(t, t, dtype=torch.bool, device=device)
            rows.append(masks[key])
        return torch.stack(rows)

    def stream_step(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor,
        cache_len: torch.Tensor,
        window: int,
        context: Sequence[int],
        read_kv: KVReader,
        write_kv: KVWriter,
        conv_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One cache-aware chunk for B streams.

        x (B, T, D): subsampled chunk frames (already past `pre_encode` and the dropped frames);
        lengths (B,) valid frames of each row; cache_len (B,) cached frames each stream has (<= window);
        window: the cache size L (NeMo's last_channel_cache_size); context: the look-ahead [L, R];
        conv_cache (layers, B, D, left): updated in place. Returns (B, T, D) and lengths.
        """
        t = x.shape[1]
        x = self._embed(x)
        total = window + t
        pos_emb = relative_positions(total, self.cfg.d_model, x.device, x.dtype)
        pos = torch.arange(total, device=x.device)[None, :]
        valid = (pos < (lengths + window)[:, None]) & (pos >= (window - cache_len)[:, None])  # (B, L + T)
        att = chunked_limited_mask(total, context, x.device)[None] & valid[:, None, :] & valid[:, :, None]
        att_mask = ~att[:, window:]  # queries are the chunk's frames
        pad_mask = ~valid[:, window:]
        for i, layer in enumerate(self.layers):
            x, k, v, conv_cache[i] = layer(x, pos_emb, att_mask, pad_mask, read_kv(i), conv_cache[i])
            write_kv(i, k, v)
        return x, lengths
