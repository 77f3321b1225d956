"""The SAN-M encoder of FunASR's Paraformer: self-attention with an FSMN memory block.

Each layer (pre-norm): x + SAN-M(LN(x)), then x + FFN(LN(x)). SAN-M projects q, k, v in one
linear; its output is multi-head attention plus an FSMN memory: a depthwise convolution over time
of v, added to v. The first layer maps the LFR features (560) to d_model and has no residual.
Input is scaled by sqrt(d_model) and gets FunASR's sinusoidal positions (1-based; sin and cos
halves concatenated). Padded frames are zeroed before every FSMN and masked from attention, so a
row's output does not depend on the rows batched with it.

Parameter names follow FunASR's state dict (`encoders0`, `encoders`, `after_norm`, ...).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.paraformer.config import EncoderConfig

LAYER_NORM_EPS = 1e-12
"""FunASR's LayerNorm epsilon (espnet heritage)."""


def sinusoid(length: int, depth: int, dtype: torch.dtype, device: torch.device, start: int = 0) -> torch.Tensor:
    """(length, depth) positions start+1..start+length as FunASR's SinusoidalPositionEncoder (and,
    with `start` the frames already embedded, its streaming form) computes them."""
    positions = torch.arange(start + 1, start + length + 1, device=device).to(dtype)
    increment = torch.log(torch.tensor([10000.0], dtype=dtype, device=device)) / (depth / 2 - 1)
    inv = torch.exp(torch.arange(depth / 2, device=device).to(dtype) * -increment)
    scaled = positions[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


def fsmn_padding(kernel_size: int, shift: int) -> tuple[int, int]:
    """(left, right) zero padding of FunASR's FSMN: centred, moved right by `shift` frames."""
    left = (kernel_size - 1) // 2 + max(shift, 0)
    return left, kernel_size - 1 - left


def fsmn_memory(conv: nn.Conv1d, padding: tuple[int, int], x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """FSMN memory block: x (B, T, D), mask (B, T, 1) float -> depthwise conv(x) + x, zero on padding."""
    x = x * mask
    y = conv(F.pad(x.transpose(1, 2), padding)).transpose(1, 2)
    out: torch.Tensor = (y + x) * mask
    return out


class SANMAttention(nn.Module):
    def __init__(self, in_size: int, cfg: EncoderConfig) -> None:
        super().__init__()
        d = cfg.output_size
        self.h, self.d_k = cfg.attention_heads, d // cfg.attention_heads
        self.linear_q_k_v = nn.Linear(in_size, 3 * d)
        self.linear_out = nn.Linear(d, d)
        self.fsmn_block = nn.Conv1d(d, d, cfg.kernel_size, groups=d, bias=False)
        self.padding = fsmn_padding(cfg.kernel_size, cfg.sanm_shift)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        out, _, _ = self.forward_chunk(x, mask, None, key_mask)
        return out

    def forward_chunk(self, x: torch.Tensor, mask: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None,
                      key_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """x (B, T, in) -> (output (B, T, D), this window's keys and values (B, H, T, d_k)). `past`:
        earlier chunks' keys and values (B, H, P, d_k) the queries also attend to, ahead of the
        window's own; key_mask (B, 1, 1, P + T). The FSMN sees the window alone (FunASR's chunked
        encoder keeps no FSMN cache)."""
        b, t, _ = x.shape
        q, k, v = self.linear_q_k_v(x).split(self.h * self.d_k, dim=-1)
        memory = fsmn_memory(self.fsmn_block, self.padding, v, mask)
        q, k, h = (z.reshape(b, t, self.h, self.d_k).transpose(1, 2) for z in (q, k, v))  # (B, H, T, d_k)
        keys, values = (k, h) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], h], 2))
        att = F.scaled_dot_product_attention(q, keys, values, attn_mask=key_mask)
        out: torch.Tensor = self.linear_out(att.transpose(1, 2).reshape(b, t, self.h * self.d_k)) + memory
        return out, k, h


class FeedForward(nn.Module):
    def __init__(self, d: int, units: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d, units)
        self.w_2 = nn.Linear(units, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w_2(torch.relu(self.w_1(x)))
        return out


class EncoderLayer(nn.Module):
    def __init__(self, in_size: int, cfg: EncoderConfig) -> None:
        super().__init__()
        self.residual = in_size == cfg.output_size
        self.self_attn = SANMAttention(in_size, cfg)
        self.feed_forward = FeedForward(cfg.output_size, cfg.linear_units)
        self.norm1 = nn.LayerNorm(in_size, eps=LAYER_NORM_EPS)
        self.norm2 = nn.LayerNorm(cfg.output_size, eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        out, _, _ = self.forward_chunk(x, mask, None, key_mask)
        return out

    def forward_chunk(self, x: torch.Tensor, mask: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None,
                      key_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """Like `forward`, attending to `past` keys and values too; also returns the window's."""
        att, k, v = self.self_attn.forward_chunk(self.norm1(x), mask, past, key_mask)
        x = x + att if self.residual else att
        out: torch.Tensor = x + self.feed_forward(self.norm2(x))
        return out, k, v


class SANMEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoders0 = nn.ModuleList([EncoderLayer(cfg.input_size, cfg)])
        self.encoders = nn.ModuleList([EncoderLayer(cfg.output_size, cfg) for _ in range(cfg.num_blocks - 1)])
        self.after_norm = nn.LayerNorm(cfg.output_size, eps=LAYER_NORM_EPS)

    @property
    def layers(self) -> tuple[EncoderLayer, ...]:
        return (*self.encoders0, *self.encoders)  # type: ignore[arg-type]

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """feats (B, T, input_size) padded, lengths (B,) -> (B, T, d_model); padded frames zero."""
        _b, t, depth = feats.shape
        valid = torch.arange(t, device=feats.device)[None, :] < lengths[:, None]  # (B, T)
        mask = valid[:, :, None].to(feats.dtype)
        key_mask = valid[:, None, None, :]  # (B, 1, 1, T): padded keys get no attention
        x = feats * math.sqrt(self.cfg.output_size) + sinusoid(t, depth, feats.dtype, feats.device)
        for layer in (*self.encoders0, *self.encoders):
            x = layer(x, mask, key_mask)
        out: torch.Tensor = self.after_norm(x) * mask
        return out
