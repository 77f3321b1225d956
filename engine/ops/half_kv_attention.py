"""Attention of float32 queries over keys and values stored as float16, and its log-sum-exp: the
Whisper decoder's cross-attention on a CPU reads every window's K/V at every step and is bound by
memory bandwidth, so half the bytes is most of half the time (engine/csrc/half_kv_attention.cpp,
one pass per (item, head) in a fixed order). The torch reference below computes the same
softmax in float32 (the kernel's rounding differs: its sums run in another order).

    out, lse = half_kv_attention(q, k, v, lengths)   # q (G, H, T, D) f32; k, v (G, H, S, D) f16
"""

from __future__ import annotations

import torch

from engine.ops.extension import kernel_for
from engine.ops.extension import use_extension as resolve_use_extension

__all__ = ["half_kv_attention", "half_kv_attention_reference", "half_kv_kernel"]


def half_kv_kernel(device: torch.device) -> bool:
    """Whether the compiled kernel serves tensors on `device` (CPU only)."""
    return device.type == "cpu" and kernel_for(device)


def half_kv_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
                                scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.float().transpose(-1, -2)) * scale  # (G, H, T, S)
    keep = torch.arange(k.shape[2], device=q.device)[None, :] < lengths[:, None]  # (G, S)
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.softmax(scores, dim=-1) @ v.float(), lse


def half_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
                      scale: float | None = None, *, use_extension: bool | None = None,
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention (G, H, T, D) float32 of q over item g's first lengths[g] rows of k, v
    (float16, rows contiguous), and its log-sum-exp (G, H, T); `scale` defaults to D ** -0.5."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if resolve_use_extension(half_kv_kernel(q.device) if use_extension is None else use_extension):
        out, lse = torch.ops.oasr.half_kv_attention(q, k, v, lengths, scale)
        return out, lse
    return half_kv_attention_reference(q, k, v, lengths, scale)
