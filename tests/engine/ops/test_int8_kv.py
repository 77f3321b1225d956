"""Packed int8 K/V rows (engine/ops/int8_kv.py): values within half a step of their row's scale,
and the compiled packer bitwise its torch reference, wherever the rows lie."""

from __future__ import annotations

import pytest
import torch

from engine.ops.int8_kv import SCALE_BYTES, pack_int8_rows, pack_int8_rows_reference, unpack_int8_rows


def _rows(seed: int = 9) -> torch.Tensor:
    """Rows over seven decades of magnitude, with a row of zeros, a tiny one and one holding NaN."""
    torch.manual_seed(seed)
    x = torch.randn(3, 6, 50, 64) * torch.logspace(-4, 3, 50)[None, None, :, None]
    x[0, 0, 0] = 0.0
    x[0, 0, 1] = 1e-30
    x[1, 2, 3, 5] = float("nan")
    return x


def test_packed_rows_keep_their_values_within_half_a_step() -> None:
    x = _rows()
    x[1, 2, 3, 5] = 0.0
    packed = pack_int8_rows_reference(x)
    assert packed.dtype == torch.int8 and packed.shape == (3, 6, 50, 64 + SCALE_BYTES)
    step = x.abs().amax(dim=-1, keepdim=True) / 127
    assert ((unpack_int8_rows(packed) - x).abs() <= step / 2 * 1.0001 + 1e-37).all()
    assert torch.equal(unpack_int8_rows(packed)[0, 0, 0], torch.zeros(64))


@pytest.mark.usefixtures("ext")
@pytest.mark.parametrize("layout", ["contiguous", "heads strided", "three dims", "odd width"])
def test_the_kernel_packs_bitwise_as_the_reference(layout: str) -> None:
    x = _rows()
    if layout == "heads strided":  # projected K/V: (B, S, H * D) viewed as (B, H, S, D)
        x = x.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)[:, :, 3:40]
    elif layout == "three dims":
        x = x[:, ::2, 7]
    elif layout == "odd width":  # the scalar path
        x = x[..., :37]
    packed = pack_int8_rows(x, use_extension=True)
    assert packed.shape == (*x.shape[:-1], x.shape[-1] + SCALE_BYTES)
    assert torch.equal(packed, pack_int8_rows_reference(x))


@pytest.mark.usefixtures("ext")
def test_the_kernel_refuses_bad_input_clearly() -> None:
    with pytest.raises(RuntimeError, match="x must be Float"):
        torch.ops.oasr.pack_int8_kv(torch.zeros(2, 8, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="x must be rows of values"):
        torch.ops.oasr.pack_int8_kv(torch.zeros(2, 0))


@pytest.mark.usefixtures("ext")
@pytest.mark.parametrize("acc_dtype", [torch.int32, torch.float32])
@pytest.mark.parametrize("with_bias", [True, False])
def test_packed_keys_and_values_come_bitwise_from_the_integer_sums(acc_dtype: torch.dtype, with_bias: bool) -> None:
    """dequantize_pack_kv: the rows `pack_int8_rows` gives for dequantize_rows' keys and values
    split into heads, bitwise, for int32 sums and oneDNN's float32 ones."""
    from engine.ops.int8_kv import dequantize_pack_kv, dequantize_pack_kv_reference
    from engine.ops.int8_rows import dequantize_rows

    torch.manual_seed(1)
    b, s, h, d = 3, 70, 6, 64
    acc = torch.randint(-200_000, 200_000, (b * s, 2 * h * d), dtype=torch.int32).to(acc_dtype)
    row_scale, col_scale = torch.rand(b * s, 1) * 1e-3, torch.rand(2 * h * d) * 1e-2
    bias = torch.randn(2 * h * d) if with_bias else None
    k, v = dequantize_pack_kv(acc, row_scale, col_scale, bias, b, h, use_extension=True)
    assert k.shape == v.shape == (b, h, s, d + SCALE_BYTES)
    out = dequantize_rows(acc, row_scale, col_scale, bias).view(b, s, 2, h, d)
    assert torch.equal(k, pack_int8_rows(out[:, :, 0].transpose(1, 2)))
    assert torch.equal(v, pack_int8_rows(out[:, :, 1].transpose(1, 2)))
    ref_k, ref_v = dequantize_pack_kv_reference(acc, row_scale, col_scale, bias, b, h)
    assert torch.equal(k, ref_k) and torch.equal(v, ref_v)


@pytest.mark.usefixtures("ext")
def test_dequantize_pack_refuses_sums_that_are_not_keys_and_values_in_heads() -> None:
    acc = torch.zeros(10, 2 * 6 * 64, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="is not 3 items' rows of keys and values in 6 heads"):
        torch.ops.oasr.dequantize_pack_kv(acc, torch.ones(10, 1), torch.ones(768), None, 3, 6)
    with pytest.raises(RuntimeError, match="col_scale has shape"):
        torch.ops.oasr.dequantize_pack_kv(acc, torch.ones(10, 1), torch.ones(700), None, 2, 6)
