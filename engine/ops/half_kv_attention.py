"""Attention of float32 queries over keys and values stored as float16, or as int8 rows with a
scale each (engine/ops/int8_kv.py), and its log-sum-exp: the Whisper decoder's cross-attention on
a CPU reads every window's K/V at every step and is bound by memory bandwidth, so fewer bytes is
most of less time (engine/csrc/half_kv_attention.cpp, one pass per (item, head) in a fixed order).
The torch reference below computes the same softmax in float32 over the stored values (the
kernel's rounding differs: its sums run in another order).

    out, lse = half_kv_attention(q, k, v, lengths)   # q (G, H, T, D) f32; k, v (G, H, S, D) f16
    out, _ = half_kv_attention(q, k, v, lengths, k_tail=silence_k, v_tail=silence_v)  # + (H, S', D)
    out, _ = half_kv_attention(q, pack_int8_rows(k), pack_int8_rows(v), lengths)  # (G, H, S, D + 4) int8
"""

from __future__ import annotations

import torch

from engine.ops.extension import cpu_kernel, kernel_for
from engine.ops.int8_kv import unpack_int8_rows

__all__ = ["half_kv_attention", "half_kv_attention_reference", "half_kv_kernel"]


def half_kv_kernel(device: torch.device) -> bool:
    """Whether the compiled kernel serves tensors on `device` (CPU only)."""
    return device.type == "cpu" and kernel_for(device)


def half_kv_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
                                scale: float | None = None, k_tail: torch.Tensor | None = None,
                                v_tail: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if k.dtype == torch.int8:  # packed rows: their values
        k, v = unpack_int8_rows(k), unpack_int8_rows(v)
        if k_tail is not None and v_tail is not None:
            k_tail, v_tail = unpack_int8_rows(k_tail), unpack_int8_rows(v_tail)
    g, s = k.shape[0], k.shape[2]
    keep = torch.arange(s, device=q.device)[None, :] < lengths[:, None]  # (G, S)
    if k_tail is not None and v_tail is not None:  # item g: its rows [0, len), the tail's [len, S_tail)
        tail_keep = torch.arange(k_tail.shape[1], device=q.device)[None, :] >= lengths[:, None]
        k = torch.cat([k, k_tail[None].expand(g, -1, -1, -1)], dim=2)
        v = torch.cat([v, v_tail[None].expand(g, -1, -1, -1)], dim=2)
        keep = torch.cat([keep, tail_keep], dim=1)
    scores = (q @ k.float().transpose(-1, -2)) * scale  # (G, H, T, S [+ S_tail])
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.softmax(scores, dim=-1) @ v.float(), lse


def half_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
                      scale: float | None = None, k_tail: torch.Tensor | None = None,
                      v_tail: torch.Tensor | None = None, *, use_extension: bool | None = None,
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention (G, H, T, D) float32 of q over item g's first lengths[g] rows of k, v
    (float16, or packed int8 rows (G, H, S, D + 4): `pack_int8_rows`; rows contiguous) and, with `k_tail`/`v_tail` (H, S_tail, D) of the same kind shared by every
    item, over the tail's rows from lengths[g] on, in one softmax; and its log-sum-exp (G, H, T).
    `scale` defaults to D ** -0.5."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if cpu_kernel(q.device, use_extension):
        out, lse = torch.ops.oasr.half_kv_attention(q, k, v, lengths, scale, k_tail, v_tail)
        return out, lse
    return half_kv_attention_reference(q, k, v, lengths, scale, k_tail, v_tail)
