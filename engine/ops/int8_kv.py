"""Keys and values stored as int8 rows with a float32 scale each: the Whisper decoder's cross K/V
on the CPU int8 path, read at every decoder step by the half-K/V attention kernel
(engine/csrc/half_kv_attention.cpp), which is bound by memory bandwidth: a row of 64 values is
68 bytes against float16's 128.

A row's scale is its largest magnitude over 127 and its values round(x / scale) (symmetric, as the
int8 linear layers quantize their activations per row): the error of a value is at most half a
step of its row's scale (~0.4 % of the row's largest value). Rounding is float32 division and
round-half-to-even, the same numbers on every CPU. The scale's four bytes follow the row's values,
so a store of packed rows is one int8 tensor that the decoder cache slices, pads and compacts
along its leading dimensions as it does float ones.

    packed = pack_int8_rows(k)        # (..., D) float -> (..., D + 4) int8
    k_again = unpack_int8_rows(packed)  # -> (..., D) float32, within half a step of k
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.ops.extension import cpu_kernel
from engine.ops.int8_rows import dequantize_rows_reference

__all__ = ["SCALE_BYTES", "dequantize_pack_kv", "dequantize_pack_kv_reference", "pack_int8_rows",
           "pack_int8_rows_reference", "unpack_int8_rows"]

SCALE_BYTES = 4
"""Bytes after a packed row's values: its float32 scale."""


def pack_int8_rows(x: Tensor, *, use_extension: bool | None = None) -> Tensor:
    """Rows x (..., D) float -> (..., D + SCALE_BYTES) int8: each row's int8 values, then its scale.
    The compiled kernel (one pass a row; engine/csrc/int8_kv.cpp) where loaded, bitwise the
    reference."""
    if cpu_kernel(x.device, use_extension):
        return torch.ops.oasr.pack_int8_kv(x.float())
    return pack_int8_rows_reference(x)


def pack_int8_rows_reference(x: Tensor) -> Tensor:
    """`pack_int8_rows` in torch ops."""
    x = x.float()
    scale = x.abs().amax(dim=-1, keepdim=True) / 127.0
    values = torch.where(scale > 0, x / scale, 0.0).round_().clamp_(-127, 127).to(torch.int8)
    return torch.cat([values, scale.contiguous().view(torch.int8)], dim=-1)


def unpack_int8_rows(packed: Tensor) -> Tensor:
    """Packed rows (..., D + SCALE_BYTES) int8 -> their values (..., D) float32."""
    scale = packed[..., -SCALE_BYTES:].contiguous().view(torch.float32)
    return packed[..., :-SCALE_BYTES].float() * scale


def dequantize_pack_kv(acc: Tensor, row_scale: Tensor, col_scale: Tensor, bias: Tensor | None, batch: int,
                       heads: int, *, use_extension: bool | None = None) -> tuple[Tensor, Tensor]:
    """The packed key and value rows (B, H, S, D + SCALE_BYTES) of a fused key-value int8
    projection, from its integer sums acc (B * S, 2 * H * D) (`dequantize_rows`' operands): what
    `pack_int8_rows` gives for the dequantized keys and values split into heads, bitwise, in one
    pass (engine/csrc/int8_kv.cpp) where the kernel is loaded."""
    if cpu_kernel(acc.device, use_extension):
        k, v = torch.ops.oasr.dequantize_pack_kv(acc, row_scale, col_scale, bias, batch, heads)
        return k, v
    return dequantize_pack_kv_reference(acc, row_scale, col_scale, bias, batch, heads)


def dequantize_pack_kv_reference(acc: Tensor, row_scale: Tensor, col_scale: Tensor, bias: Tensor | None,
                                 batch: int, heads: int) -> tuple[Tensor, Tensor]:
    """`dequantize_pack_kv` in torch ops."""
    out = dequantize_rows_reference(acc, row_scale, col_scale, bias)  # (B * S, 2 * H * D)
    kv = out.view(batch, acc.shape[0] // batch, 2, heads, -1).permute(2, 0, 3, 1, 4)  # (2, B, H, S, D)
    return pack_int8_rows_reference(kv[0]), pack_int8_rows_reference(kv[1])
