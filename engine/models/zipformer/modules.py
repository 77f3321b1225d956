"""Zipformer2's building blocks at inference (icefall egs/librispeech/ASR/zipformer, eval mode):
activations, BiasNorm, the relative-position attention weights shared by three consumers, the
gated convolution module with its chunk-causal depthwise convolution, and the feed-forwards.

Layout is batch-first, (B, T, C), throughout. The training-time parts of icefall's modules
(balancers, whitening, dropout, layer skipping) are the identity at inference and are absent.
Parameter names follow icefall's so its state dict loads unchanged. Every streaming method takes
its cache rows and returns the new ones; nothing is kept on the module.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MASKED_SCORE = -1000.0
"""What icefall writes into masked attention scores (not -inf: a fully masked row stays finite)."""


def swoosh_l(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x - 4.0) - 0.08 * x - 0.035


def swoosh_r(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x - 1.0) - 0.08 * x - 0.313261687


class BiasNorm(nn.Module):
    """x / rms(x - bias) * exp(log_scale): icefall's LayerNorm replacement."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.tensor(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (torch.mean((x - self.bias) ** 2, dim=-1, keepdim=True) ** -0.5) * self.log_scale.exp()


class ActivationLinear(nn.Module):
    """icefall's ActivationDropoutAndLinear at inference: linear(swoosh(x))."""

    def __init__(self, d_in: int, d_out: int, activation: str) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(d_out))
        self.act = swoosh_l if activation == "SwooshL" else swoosh_r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.act(x), self.weight, self.bias)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.in_proj = nn.Linear(dim, hidden)
        self.out_proj = ActivationLinear(hidden, dim, "SwooshL")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.in_proj(x))


def rel_positions(pos_dim: int, num_queries: int, left: int) -> torch.Tensor:
    """(2T-1+left, pos_dim) CompactRelPositionalEncoding rows for relative positions
    -(T+left-1) .. T-1, in that order: atan-compressed distances at `pos_dim/2` frequencies,
    the last column a constant 1 (a bias)."""
    span = num_queries + left
    x = torch.arange(-(span - 1), num_queries, dtype=torch.float32).unsqueeze(1)
    freqs = 1 + torch.arange(pos_dim // 2)
    compression = pos_dim**0.5
    x_compressed = compression * x.sign() * ((x.abs() + compression).log() - math.log(compression))
    x_atan = (x_compressed / (pos_dim / (2.0 * math.pi))).atan()
    pe = torch.zeros(x.shape[0], pos_dim)
    pe[:, 0::2] = (x_atan * freqs).cos()
    pe[:, 1::2] = (x_atan * freqs).sin()
    pe[:, -1] = 1.0
    return pe


class AttentionWeights(nn.Module):
    """Multi-head attention weights with relative-position scores (icefall's
    RelPositionMultiheadAttentionWeights); queries carry their scale in the projection."""

    def __init__(self, dim: int, pos_dim: int, heads: int, query_head_dim: int, pos_head_dim: int) -> None:
        super().__init__()
        self.heads, self.qd, self.pd = heads, query_head_dim, pos_head_dim
        self.in_proj = nn.Linear(dim, (2 * query_head_dim + pos_head_dim) * heads)
        self.linear_pos = nn.Linear(pos_dim, heads * pos_head_dim, bias=False)

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, key_mask: torch.Tensor | None, cached_key: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D); pos (2T-1+L, pos_dim); key_mask (B, L+T) True = masked; cached_key
        (B, L, H*qd) or None (L = 0). Returns weights (B, H, T, L+T) and the keys (B, L+T, H*qd)."""
        b, t, _ = x.shape
        h, qd, pd = self.heads, self.qd, self.pd
        proj = self.in_proj(x)
        q, k, p = proj[..., : h * qd], proj[..., h * qd : 2 * h * qd], proj[..., 2 * h * qd :]
        if cached_key is not None:
            k = torch.cat([cached_key, k], dim=1)
        keys = k
        tk = k.shape[1]
        q = q.reshape(b, t, h, qd).transpose(1, 2)  # (B, H, T, qd)
        k = k.reshape(b, tk, h, qd).permute(0, 2, 3, 1)  # (B, H, qd, Tk)
        scores = torch.matmul(q, k)  # (B, H, T, Tk)
        p = p.reshape(b, t, h, pd).transpose(1, 2)  # (B, H, T, pd)
        pe = self.linear_pos(pos).reshape(-1, h, pd).permute(1, 2, 0)  # (H, pd, P)
        pos_scores = torch.matmul(p, pe).contiguous()  # (B, H, T, P), P = T + Tk - 1
        s = pos_scores.stride()
        # row i reads columns (T-1-i) .. (T-1-i+Tk-1): key j at relative position j - i - L
        pos_scores = pos_scores.as_strided((b, h, t, tk), (s[0], s[1], s[2] - s[3], s[3]), storage_offset=s[3] * (t - 1))
        scores = scores + pos_scores
        if key_mask is not None:
            scores = scores.masked_fill(key_mask[:, None, None, :], MASKED_SCORE)
        return scores.softmax(dim=-1), keys


class SelfAttention(nn.Module):
    """Values attended with given weights (icefall's SelfAttention)."""

    def __init__(self, dim: int, heads: int, value_head_dim: int) -> None:
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(dim, heads * value_head_dim)
        self.out_proj = nn.Linear(heads * value_head_dim, dim)

    def forward(
        self, x: torch.Tensor, weights: torch.Tensor, cached: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D), weights (B, H, T, L+T), cached (B, L, H*vd) -> out (B, T, D), values (B, L+T, H*vd)."""
        b, t, _ = x.shape
        v = self.in_proj(x)
        if cached is not None:
            v = torch.cat([cached, v], dim=1)
        values = v
        v = v.reshape(b, v.shape[1], self.heads, -1).transpose(1, 2)  # (B, H, Tk, vd)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, -1)
        return self.out_proj(out), values


class NonlinAttention(nn.Module):
    """tanh-gated values attended with the first head's weights, times a second gate."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.in_proj = nn.Linear(dim, 3 * hidden)
        self.out_proj = nn.Linear(hidden, dim)

    def forward(
        self, x: torch.Tensor, weights: torch.Tensor, cached: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """weights (B, 1, T, L+T); cached (B, L, hidden) -> out (B, T, D), gated values (B, L+T, hidden)."""
        s, v, y = self.in_proj(x).chunk(3, dim=-1)
        v = v * torch.tanh(s)
        if cached is not None:
            v = torch.cat([cached, v], dim=1)
        out = torch.matmul(weights[:, 0], v) * y  # (B, T, hidden)
        return self.out_proj(out), v


def depthwise_conv1d(x: torch.Tensor, conv: nn.Conv1d, left: int, right: int) -> torch.Tensor:
    """`conv` (depthwise, no padding of its own) over x (B, C, T) zero-padded by left/right.
    Padding first and convolving unpadded is 2-7x faster in oneDNN than the conv's own padding
    when the padding exceeds the chunk (kernel 31 on 2-16 frames; benchmarks/records/history.md), with the same result."""
    return F.conv1d(F.pad(x, (left, right)), conv.weight, conv.bias, groups=conv.groups)


class ChunkCausalConv(nn.Module):
    """icefall's ChunkCausalDepthwiseConv1d: a causal depthwise conv of half the kernel plus a
    within-chunk symmetric one scaled by learned corrections near the chunk's edges."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.causal_conv = nn.Conv1d(channels, channels, (kernel + 1) // 2, groups=channels)
        self.chunkwise_conv = nn.Conv1d(channels, channels, kernel, groups=channels)  # padded by the caller
        self.chunkwise_conv_scale = nn.Parameter(torch.zeros(2, channels, kernel))

    def edge_scale(self, lengths: torch.Tensor, total: int) -> torch.Tensor:
        """(B, C, total): 1 + left-edge correction at positions < kernel + right-edge correction in
        each row's last `kernel` valid positions (one whole-utterance chunk per row)."""
        k = self.kernel
        pos = torch.arange(total, device=lengths.device)
        left = self.chunkwise_conv_scale[0]  # (C, K)
        right = self.chunkwise_conv_scale[1]
        left_part = F.pad(left, (0, max(0, total - k)))[:, :total]  # (C, total)
        ridx = pos.unsqueeze(0) - lengths.unsqueeze(1) + k  # (B, total): index into right edge
        inside = (ridx >= 0) & (ridx < k)
        right_part = right[:, ridx.clamp(0, k - 1)].permute(1, 0, 2) * inside.unsqueeze(1)  # (B, C, total)
        return 1.0 + left_part.unsqueeze(0) + right_part

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Offline, whole utterance as one chunk: x (B, C, T) zero beyond each length."""
        pad = self.kernel // 2
        causal = depthwise_conv1d(x, self.causal_conv, pad, 0)
        chunk = depthwise_conv1d(x, self.chunkwise_conv, pad, pad) * self.edge_scale(lengths, x.shape[2])
        return chunk + causal

    def step(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk: x (B, C, T), cache (B, C, kernel//2) -> out (B, C, T), new cache."""
        t = x.shape[2]
        full = torch.cat([cache, x], dim=2)
        causal = depthwise_conv1d(full, self.causal_conv, 0, 0)
        lengths = torch.full((x.shape[0],), t, dtype=torch.long, device=x.device)
        pad = self.kernel // 2
        chunk = depthwise_conv1d(x, self.chunkwise_conv, pad, pad) * self.edge_scale(lengths, t)
        return chunk + causal, full[:, :, -(self.kernel // 2) :]


class ConvModule(nn.Module):
    def __init__(self, dim: int, kernel: int, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.in_proj = nn.Linear(dim, 2 * dim)
        self.depthwise_conv: nn.Module = (
            ChunkCausalConv(dim, kernel) if causal else nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        )
        self.out_proj = ActivationLinear(dim, dim, "SwooshR")

    def _gate(self, x: torch.Tensor) -> torch.Tensor:
        x, s = self.in_proj(x).chunk(2, dim=-1)
        return (x * torch.sigmoid(s)).transpose(1, 2)  # (B, C, T)

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None, lengths: torch.Tensor) -> torch.Tensor:
        g = self._gate(x)
        if pad_mask is not None:
            g = g.masked_fill(pad_mask.unsqueeze(1), 0.0)
        if self.causal:
            g = self.depthwise_conv(g, lengths)
        else:
            g = self.depthwise_conv(g)
        return self.out_proj(g.transpose(1, 2))

    def step(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert isinstance(self.depthwise_conv, ChunkCausalConv)
        g, cache = self.depthwise_conv.step(self._gate(x), cache)
        return self.out_proj(g.transpose(1, 2)), cache


class Bypass(nn.Module):
    """orig + (x - orig) * per-channel scale."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bypass_scale = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, orig: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return orig + (x - orig) * self.bypass_scale
