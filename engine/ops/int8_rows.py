"""Row-wise int8 quantisation around an int32 GEMM, for the CPU int8 linear layers
(engine/models/whisper/int8.py): `torch.ops.oasr.quantize_rows` / `dequantize_rows` do each in
one pass over memory (engine/csrc/int8_rows.cpp), or the torch references below, which take four
or five elementwise passes. Both compute the same float32 operations in the same order, so their
results are bitwise equal (tests/engine/ops/test_int8_rows.py).

    q, scale = quantize_rows(x)          # x (M, K) float32 -> q (M, K) int8, scale (M, 1)
    y = dequantize_rows(torch._int_mm(q, w_int8.t()), scale, w_scale, bias)   # (M, N) float32

Each row gets its own scale (max |x| / 127), so a row's result never depends on its batch mates.

For a few rows on a CPU with AVX-512 VNNI, `RowsLinear` does all three in one call, bitwise the
same outputs (a decoder step's layer is otherwise oneDNN's per-call overhead, ~30 us of a
~2 us product):

    rows = RowsLinear.for_weight(w_int8, w_scale, bias)   # None: no such CPU, kernel or shape
    y = rows(x) if rows is not None and x.shape[0] <= RowsLinear.MAX_ROWS else ...
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.cpu_facts import host_cpu_facts
from engine.ops.extension import cpu_kernel, kernel_for

__all__ = ["ACTIVATION_MAX", "UNSIGNED_OFFSET", "RowsLinear", "dequantize_rows", "dequantize_rows_reference",
           "quantize_rows", "quantize_rows_reference", "quantize_rows_u8", "quantize_rows_u8_reference"]

VNNI_FLAGS = ("avx512f", "avx512bw", "avx512_vnni")

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


def quantize_rows(x: torch.Tensor, *, use_extension: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) float32 -> (int8 (M, K), float32 scale (M, 1)) with x ≈ q * scale per row."""
    if cpu_kernel(x.device, use_extension):
        q, scale = torch.ops.oasr.quantize_rows(x)
        return q, scale
    return quantize_rows_reference(x)


def quantize_rows_u8(x: torch.Tensor, *, use_extension: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) float32 -> (uint8 q + 128 (M, K), float32 scale (M, 1)): quantize_rows' q, offset."""
    if cpu_kernel(x.device, use_extension):
        q, scale = torch.ops.oasr.quantize_rows_u8(x)
        return q, scale
    return quantize_rows_u8_reference(x)


def dequantize_rows(acc: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor,
                    bias: torch.Tensor | None = None, *, use_extension: bool | None = None) -> torch.Tensor:
    """acc (M, N) int32, or float32 holding integers below 2**24 (oneDNN's int8 matmul) -> acc *
    row_scale (M, 1) * col_scale (N,) + bias (N,), float32."""
    if cpu_kernel(acc.device, use_extension):
        out: torch.Tensor = torch.ops.oasr.dequantize_rows(acc, row_scale, col_scale, bias)
        return out
    return dequantize_rows_reference(acc, row_scale, col_scale, bias)


@dataclass(frozen=True)
class RowsLinear:
    """An int8 linear layer's weight packed for `torch.ops.oasr.int8_linear_rows`: y = x Wᵀ + b for
    a few rows x (M, K) float32, exactly `dequantize_rows(int8 GEMM of quantize_rows(x))`."""

    packed: torch.Tensor  # (K / 4, N, 4) int8
    offsets: torch.Tensor  # (N,) int32: 128 * Σ_k w, the u8 activations' offset times each column's sum
    col_scale: torch.Tensor
    bias: torch.Tensor | None

    MAX_ROWS = 32
    """Up to this many rows the kernel beats oneDNN's int8 matmul on every layer of tiny.en
    measured (Sapphire Rapids, 1 and 2 threads: 6-10 us against 65-90 us at one row, about even
    at 32; oneDNN's tiles win from 64)."""

    @classmethod
    def for_weight(cls, weight_int8: torch.Tensor, col_scale: torch.Tensor,
                   bias: torch.Tensor | None) -> RowsLinear | None:
        """The packed layer, or None where the kernel cannot serve it: no compiled kernels, a CPU
        without AVX-512 VNNI, or a shape it does not take (K a multiple of 4, N of 16)."""
        n, k = weight_int8.shape
        flags = host_cpu_facts().flags
        if (weight_int8.device.type != "cpu" or not kernel_for(weight_int8.device) or k % 4 or n % 16 or n == 0
                or not all(flag in flags for flag in VNNI_FLAGS)):
            return None
        offsets = weight_int8.sum(dim=1, dtype=torch.int32) * UNSIGNED_OFFSET
        return cls(torch.ops.oasr.pack_int8_rows_weight(weight_int8), offsets, col_scale, bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.oasr.int8_linear_rows(x, self.packed, self.offsets, self.col_scale, self.bias)
        return out
