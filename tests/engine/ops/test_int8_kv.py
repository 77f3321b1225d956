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
