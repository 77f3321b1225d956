"""One FastConformer block as NeMo's ConformerLayer: half-step feed-forward, relative-position
self-attention, convolution module, half-step feed-forward, layer norm. Names match NeMo's
state dict (`layers.<i>.feed_forward1.linear1`, `.conv.depthwise_conv`, `.conv.batch_norm`, ...).

The depthwise convolution sees `conv_context = (left, right)` frames; causal models (right = 0)
stream with a cache of the last `left` inputs of the convolution (`cache_last_time`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.nemo.attention import RelPositionAttention
from engine.models.nemo.config import EncoderConfig

FF_RESIDUAL = 0.5
"""Macaron half-step: each feed-forward adds half its output."""


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, use_bias: bool) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=use_bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=use_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(F.silu(self.linear1(x)))


class ConvModule(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.context = cfg.conv_context
        self.layer_norm = cfg.conv_norm_type == "layer_norm"
        self.pointwise_conv1 = nn.Conv1d(d, 2 * d, 1, bias=cfg.use_bias)
        self.depthwise_conv = nn.Conv1d(d, d, cfg.conv_kernel_size, groups=d, bias=cfg.use_bias)
        self.batch_norm: nn.Module = nn.LayerNorm(d) if self.layer_norm else nn.BatchNorm1d(d)
        self.pointwise_conv2 = nn.Conv1d(d, d, 1, bias=cfg.use_bias)

    def forward(
        self, x: torch.Tensor, pad_mask: torch.Tensor | None, cache: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D); pad_mask (B, T) True = padding; cache (B, D, left) of earlier inputs.
        Returns (B, T, D) and the next cache (None without one)."""
        x = F.glu(self.pointwise_conv1(x.transpose(1, 2)), dim=1)  # (B, D, T)
        if pad_mask is not None:
            x = x.masked_fill(pad_mask.unsqueeze(1), 0.0)
        left, right = self.context
        if cache is None:
            x = F.pad(x, (left, right))
            next_cache = None
        else:
            x = torch.cat((cache, F.pad(x, (0, right))), dim=-1)
            next_cache = x[:, :, -cache.shape[-1] :]
        x = self.depthwise_conv(x)
        if self.layer_norm:
            x = self.batch_norm(x.transpose(1, 2)).transpose(1, 2)
        else:
            x = self.batch_norm(x)
        x = self.pointwise_conv2(F.silu(x))
        return x.transpose(1, 2), next_cache


class ConformerLayer(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        d, d_ff = cfg.d_model, cfg.d_model * cfg.ff_expansion_factor
        self.norm_feed_forward1 = nn.LayerNorm(d)
        self.feed_forward1 = FeedForward(d, d_ff, cfg.use_bias)
        self.norm_conv = nn.LayerNorm(d)
        self.conv = ConvModule(cfg)
        self.norm_self_att = nn.LayerNorm(d)
        self.self_attn = RelPositionAttention(d, cfg.n_heads, cfg.use_bias)
        self.norm_feed_forward2 = nn.LayerNorm(d)
        self.feed_forward2 = FeedForward(d, d_ff, cfg.use_bias)
        self.norm_out = nn.LayerNorm(d)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        att_mask: torch.Tensor | None,
        pad_mask: torch.Tensor | None,
        kv_prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
        conv_cache: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Returns the block output (B, T, D), this chunk's K and V (B, T, H, d_k), next conv cache."""
        residual = x + self.feed_forward1(self.norm_feed_forward1(x)) * FF_RESIDUAL
        att, k, v = self.self_attn(self.norm_self_att(residual), pos_emb, att_mask, kv_prefix)
        residual = residual + att
        conv, next_cache = self.conv(self.norm_conv(residual), pad_mask, conv_cache)
        residual = residual + conv
        residual = residual + self.feed_forward2(self.norm_feed_forward2(residual)) * FF_RESIDUAL
        return self.norm_out(residual), k, v, next_cache
