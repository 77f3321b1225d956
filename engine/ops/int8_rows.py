"""Row-wise int8 quantisation around an int32 GEMM, for the CPU int8 linear layers
(engine/models/whisper/int8.py): `torch.ops.oasr.quantize_rows` / `dequantize_rows` do each in
one pass over memory (engine/csrc/int8_rows.cpp), or the torch references below, which take four
or five elementwise passes. Both compute the same float32 operations in the same order, so their
results are bitwise equal (tests/engine/ops/test_int8_rows.py).

    q, scale = quantize_rows(x)          # x (M, K) float32 -> q (M, K) int8, scale (M, 1)
    y = dequantize_rows(torch._int_mm(q, w_int8.t()), scale, w_scale, bias)   # (M, N) float32

Each row gets its own scale (max |x| / 127), so a row's result never depends on its batch mates.
"""

from __future__ import annotations

import torch

from engine.ops.extension import kernel_for
from engine.ops.extension import use_extension as resolve_use_extension

__all__ = ["ACTIVATION_MAX", "UNSIGNED_OFFSET", "dequantize_rows", "dequantize_rows_reference", "quantize_rows",
           "quantize_rows_reference", "quantize_rows_u8", "quantize_rows_u8_reference"]

ACTIVATION_MAX = 127  # symmetric int8 activations
MIN_SCALE = 1e-12  # an all-zero row quantises to zeros instead of dividing by zero
UNSIGNED_OFFSET = 128
"""quantize_rows_u8 stores q + 128 in [1, 255]: oneDNN's AMX int8 matmul runs its tiles for unsigned
activations with this zero point (signed ones take a path ~100x slower, measured with oneDNN 3.12)."""


def quantize_rows_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = x.abs().amax(dim=1, keepdim=True).clamp_(min=MIN_SCALE) / ACTIVATION_MAX  # (M, 1)
    return torch.round(x / scale).to(torch.int8), scale


def quantize_rows_u8_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q, scale = quantize_rows_reference(x)
    return (q.view(torch.uint8) ^ UNSIGNED_OFFSET), scale  # two's complement: q ^ 0x80 == q + 128


def dequantize_rows_reference(acc: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor,
                              bias: torch.Tensor | None = None) -> torch.Tensor:
    out = acc.to(torch.float32, copy=True).mul_(row_scale).mul_(col_scale)  # a float acc stays the caller's
    return out.add_(bias) if bias is not None else out


def _fused(device: torch.device, use_extension: bool | None) -> bool:
    if use_extension is None:
        use_extension = kernel_for(device) and device.type == "cpu"
    return resolve_use_extension(use_extension)


def quantize_rows(x: torch.Tensor, *, use_extension: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) float32 -> (int8 (M, K), float32 scale (M, 1)) with x ≈ q * scale per row."""
    if _fused(x.device, use_extension):
        q, scale = torch.ops.oasr.quantize_rows(x)
        return q, scale
    return quantize_rows_reference(x)


def quantize_rows_u8(x: torch.Tensor, *, use_extension: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) float32 -> (uint8 q + 128 (M, K), float32 scale (M, 1)): quantize_rows' q, offset."""
    if _fused(x.device, use_extension):
        q, scale = torch.ops.oasr.quantize_rows_u8(x)
        return q, scale
    return quantize_rows_u8_reference(x)


def dequantize_rows(acc: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor,
                    bias: torch.Tensor | None = None, *, use_extension: bool | None = None) -> torch.Tensor:
    """acc (M, N) int32, or float32 holding integers below 2**24 (oneDNN's int8 matmul) -> acc *
    row_scale (M, 1) * col_scale (N,) + bias (N,), float32."""
    if _fused(acc.device, use_extension):
        out: torch.Tensor = torch.ops.oasr.dequantize_rows(acc, row_scale, col_scale, bias)
        return out
    return dequantize_rows_reference(acc, row_scale, col_scale, bias)
