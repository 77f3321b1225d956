"""Transformer-XL relative-position self-attention as NeMo computes it (RelPositionMultiHeadAttention).

Scores are ((q + u) k^T + rel_shift((q + v) p^T)) / sqrt(d_k), masked with -10000 (NeMo's INF_VAL,
so a fully masked padding row stays finite) and zeroed after the softmax. For streaming, the keys
and values of earlier frames come in as a prefix (already projected, read from the paged pool),
laid out like NeMo's fixed-size cache: the newest at the end, unfilled slots masked.
"""

from __future__ import annotations

import math

import torch
from torch import nn

MASK_VALUE = -10000.0
"""NeMo's INF_VAL: the score a masked key gets before the softmax."""
PE_BASE = 10000.0


def relative_positions(length: int, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(1, 2 * length - 1, dim): sinusoids of positions length-1 .. -(length-1), NeMo's
    RelPositionalEncoding table slice for an input of `length` frames (keys incl. cache)."""
    positions = torch.arange(length - 1, -length, -1, dtype=torch.float32, device=device).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32, device=device) * -(math.log(PE_BASE) / dim))
    pe = torch.zeros(positions.shape[0], dim, device=device)
    pe[:, 0::2] = torch.sin(positions * div)
    pe[:, 1::2] = torch.cos(positions * div)
    return pe.unsqueeze(0).to(dtype)


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T1, P) -> (B, H, T1, P): row i shifted so column j holds relative distance i - j."""
    b, h, t1, p = x.shape
    x = torch.nn.functional.pad(x, (1, 0)).view(b, h, -1, t1)
    return x[:, :, 1:].view(b, h, t1, p)


class RelPositionAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, use_bias: bool) -> None:
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.linear_q = nn.Linear(d_model, d_model, bias=use_bias)
        self.linear_k = nn.Linear(d_model, d_model, bias=use_bias)
        self.linear_v = nn.Linear(d_model, d_model, bias=use_bias)
        self.linear_out = nn.Linear(d_model, d_model, bias=use_bias)
        self.linear_pos = nn.Linear(d_model, d_model, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(n_heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(n_heads, self.d_k))

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D) -> K, V each (B, T, H, d_k): what a frame stores for later chunks."""
        b, t, _ = x.shape
        return self.linear_k(x).view(b, t, self.h, self.d_k), self.linear_v(x).view(b, t, self.h, self.d_k)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        mask: torch.Tensor | None,
        prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, D) queries (and new keys); pos_emb (1, 2Tk-1, D); mask (B, T, Tk) True = hidden;
        prefix: K, V (B, Tc, H, d_k) of cached frames, Tk = Tc + T.
        Returns the output (B, T, D) and this call's K, V (B, T, H, d_k)."""
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.h, self.d_k)
        k_new, v_new = self.project_kv(x)
        k, v = k_new, v_new
        if prefix is not None:
            k = torch.cat((prefix[0], k_new), dim=1)
            v = torch.cat((prefix[1], v_new), dim=1)
        k = k.transpose(1, 2)  # (B, H, Tk, d_k)
        v = v.transpose(1, 2)
        p = self.linear_pos(pos_emb).view(pos_emb.shape[0], -1, self.h, self.d_k).transpose(1, 2)
        q_u = (q + self.pos_bias_u).transpose(1, 2)  # (B, H, T, d_k)
        q_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_bd = rel_shift(torch.matmul(q_v, p.transpose(-2, -1)))
        matrix_ac = torch.matmul(q_u, k.transpose(-2, -1))
        scores = (matrix_ac + matrix_bd[:, :, :, : matrix_ac.shape[-1]]) / math.sqrt(self.d_k)
        if mask is not None:
            hidden = mask.unsqueeze(1)
            attn = torch.softmax(scores.masked_fill(hidden, MASK_VALUE), dim=-1).masked_fill(hidden, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, self.h * self.d_k)
        return self.linear_out(out), k_new, v_new
