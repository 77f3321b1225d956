"""Whisper's cross-attention keys and values as the decoder cache keeps them: projected from a
window's encoder states by a decoder block's cross-attention, then stored contiguous in the
model's `TextDecoder.cross_kv_dtype` (the states' float type, float16, or packed int8 rows with a
scale each: engine/ops/int8_kv.py), which the cross-attention kernel reads at every step.

    k, v = project_stored(attn, states, kind)           # one batch of windows, (B, H, S, Dh) each
    k, v = project_own(attn, features, positions, projected, kind)  # a prefill's, own positions only
    stored_values(k)                                    # float values of stored K/V (alignment)
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from engine.models.whisper.int8 import Int8Linear
from engine.ops.int8_kv import dequantize_pack_kv, pack_int8_rows, unpack_int8_rows


class KeyValueProjection(Protocol):
    """A decoder block's cross-attention (model.MultiHeadAttention), as far as its K/V go: its
    heads and its key/value projection (an int8 model's fused one in `__dict__['fused_kv']`)."""

    n_head: int

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]: ...


def as_stored(x: Tensor, kind: torch.dtype | None) -> Tensor:
    """Cross K/V x as the cache keeps them, contiguous (read every step: a strided layout costs 10x
    in matmuls), cast and laid out in one copy: packed int8 rows where `kind` is torch.int8 (x
    packed already passes through), else x in `kind` (None: its own float type)."""
    if x.dtype == torch.int8:
        return x.contiguous()
    if kind == torch.int8:
        return pack_int8_rows(x)
    return x.to(kind or x.dtype, memory_format=torch.contiguous_format)


def project_stored(attn: KeyValueProjection, x: Tensor, kind: torch.dtype | None) -> tuple[Tensor, Tensor]:
    """The keys and values (B, H, S, Dh) of states x (B, S, C) as `as_stored` keeps them. Packed int8
    rows from a fused int8 projection come straight from its integer sums (`dequantize_pack_kv`,
    bitwise the same rows), without its float32 output between."""
    fused: Int8Linear | None = attn.__dict__.get("fused_kv")
    if kind == torch.int8 and fused is not None:
        sums = fused.integer_sums(x)
        if sums is not None:
            return dequantize_pack_kv(sums[0], sums[1], fused.weight_scale, fused.bias, x.shape[0], attn.n_head)
    k, v = attn.project_kv(x)
    return as_stored(k, kind), as_stored(v, kind)


def stored_values(kv: Tensor) -> Tensor:
    """The values of stored cross K/V (packed int8 rows unpacked to float32)."""
    return unpack_int8_rows(kv) if kv.dtype == torch.int8 else kv


def project_own(attn: KeyValueProjection, features: Tensor, positions: list[int] | None,
                projected: list[tuple[Tensor, Tensor] | None], kind: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """Cross K/V (G, H, S, Dh) of features (G, S, C), stored as `kind` (`as_stored`): item i's from
    `projected[i]` (1, H, own positions, Dh, stored; `TextDecoder.project_cross`, computed beside
    the decoder) or projected here from its own `positions` only, in runs of consecutive items of
    one length (the runner sorts them by length), read and written as slices; the rest is zeros,
    which attention masks. Windows joining one live prefill differ in length by
    seconds (measured at 16 lockstep sessions: engine CPU 89.6 -> 87.4 s, identical transcripts).
    Each piece is stored as it is projected, not the whole after: a long request's 16-window
    prefill zeroed, wrote and cast 37 MB of float32 a layer."""
    g, s, _ = features.shape
    own = [s] * g if positions is None else positions
    if all(p is None for p in projected) and len(set(own)) == 1:
        return project_stored(attn, features[:, : own[0]], kind)
    pieces = [(slice(i, i + 1), p[0], p[1]) for i, p in enumerate(projected) if p is not None]
    first = 0
    while first < g:  # runs of consecutive items of one length (the runner sorts them by length)
        end = first + 1
        if projected[first] is None:
            while end < g and projected[end] is None and own[end] == own[first]:
                end += 1
            k_own, v_own = project_stored(attn, features[first:end, : own[first]], kind)  # a view: no gathered copy
            pieces.append((slice(first, end), k_own, v_own))
        first = end
    like = pieces[0][1]
    k = like.new_zeros(g, like.shape[1], s, like.shape[3])
    v = torch.zeros_like(k)
    for items, k_own, v_own in pieces:
        k[items, :, : k_own.shape[2]], v[items, :, : v_own.shape[2]] = k_own, v_own
    return k, v
