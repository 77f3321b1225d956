"""The one-pass int8 row kernels equal their torch references bit for bit, and refuse bad input."""

from __future__ import annotations

import pytest
import torch

from engine.ops.int8_rows import (
    dequantize_rows,
    dequantize_rows_reference,
    quantize_rows,
    quantize_rows_reference,
    quantize_rows_u8,
    quantize_rows_u8_reference,
)

pytestmark = pytest.mark.usefixtures("ext")


@pytest.mark.parametrize("shape", [(1, 384), (7, 1536), (64, 40), (0, 16), (3, 1)])
def test_quantize_rows_equals_the_reference(shape: tuple[int, int]) -> None:
    torch.manual_seed(0)
    x = torch.randn(*shape) * torch.logspace(-3, 3, shape[0]).unsqueeze(1) if shape[0] else torch.randn(*shape)
    if shape[0] > 2:
        x[1] = 0.0  # an all-zero row: the scale floor, no division by zero
        x[2, 0] = 2.5 * x[2].abs().max()  # an outlier sets its row's scale only
    q, scale = quantize_rows(x, use_extension=True)
    q_ref, scale_ref = quantize_rows_reference(x)
    assert q.dtype == torch.int8 and scale.shape == (shape[0], 1)
    assert torch.equal(scale, scale_ref)
    assert torch.equal(q, q_ref)


def test_unsigned_rows_are_the_signed_ones_offset_by_128() -> None:
    """The activations of oneDNN's AMX matmul: q + 128 as uint8, the same q and scales."""
    torch.manual_seed(3)
    x = torch.randn(9, 1536) * torch.logspace(-2, 2, 9).unsqueeze(1)
    x[4] = 0.0
    q, scale = quantize_rows(x, use_extension=True)
    q_u8, scale_u8 = quantize_rows_u8(x, use_extension=True)
    assert q_u8.dtype == torch.uint8 and torch.equal(scale_u8, scale)
    assert torch.equal(q_u8.long() - 128, q.long())
    q_ref, scale_ref = quantize_rows_u8_reference(x)
    assert torch.equal(q_u8, q_ref) and torch.equal(scale_u8, scale_ref)
    assert int(q_u8.min()) >= 1  # [-127, 127] + 128: 0 is never written


def test_ties_round_half_to_even_like_torch() -> None:
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 126.5]])
    q, _ = quantize_rows(x, use_extension=True)
    assert torch.equal(q, quantize_rows_reference(x)[0])
    assert q.tolist() == [[127, 0, 2, 2, 0, -2, 126]]


@pytest.mark.parametrize("with_bias", [True, False])
def test_dequantize_rows_equals_the_reference(with_bias: bool) -> None:
    torch.manual_seed(1)
    m, n = 37, 1536
    acc = torch.randint(-(2**24), 2**24, (m, n), dtype=torch.int32)
    row_scale = torch.rand(m, 1) * 1e-2
    col_scale = torch.rand(n) * 1e-3
    bias = torch.randn(n) if with_bias else None
    out = dequantize_rows(acc, row_scale, col_scale, bias, use_extension=True)
    assert torch.equal(out, dequantize_rows_reference(acc, row_scale, col_scale, bias))
    # the same sums held as float32 (oneDNN's int8 matmul) give the same bits; the caller's acc is kept
    as_float = acc.float()
    assert torch.equal(dequantize_rows(as_float, row_scale, col_scale, bias, use_extension=True), out)
    assert torch.equal(dequantize_rows_reference(as_float, row_scale, col_scale, bias), out)
    assert torch.equal(as_float, acc.float())
    # a row's output depends on that row only
    alone = dequantize_rows(acc[5:6], row_scale[5:6], col_scale, bias, use_extension=True)
    assert torch.equal(alone, out[5:6])


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="quantize_rows: x must be Float"):
        quantize_rows(torch.zeros(2, 3, dtype=torch.float64), use_extension=True)
    with pytest.raises(RuntimeError, match="quantize_rows: x must have 2 dimensions"):
        quantize_rows(torch.zeros(3), use_extension=True)
    acc = torch.zeros(2, 4, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="dequantize_rows: row_scale has shape"):
        dequantize_rows(acc, torch.ones(3, 1), torch.ones(4), use_extension=True)
    with pytest.raises(RuntimeError, match="dequantize_rows: bias has shape"):
        dequantize_rows(acc, torch.ones(2, 1), torch.ones(4), torch.ones(5), use_extension=True)
    with pytest.raises(RuntimeError, match="dequantize_rows: acc must be Int or Float"):
        dequantize_rows(acc.double(), torch.ones(2, 1), torch.ones(4), use_extension=True)


def test_int8_linear_is_the_same_with_and_without_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whisper's int8 layers (the engine's CPU default) give the same bits on either path, so
    OASR_DISABLE_EXTENSIONS=1 changes no int8 transcript."""
    import engine.ops.int8_rows as int8_rows
    from engine.models.whisper.int8 import Int8Linear

    torch.manual_seed(2)
    layer = Int8Linear(torch.randn(1536, 384) * 0.05, torch.randn(1536))
    x = torch.randn(2, 75, 384)
    fused = layer(x)
    monkeypatch.setattr(int8_rows, "cpu_kernel", lambda device, requested: False)
    assert torch.equal(layer(x), fused)
