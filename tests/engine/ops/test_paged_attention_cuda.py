"""Paged attention on a GPU: the CUDA kernel against the CPU kernel (float32 to 1e-5; float16
and bfloat16 against float32 within their own rounding). Skips without a GPU or CUDA kernels."""

from __future__ import annotations

import pytest
import torch

from engine.ops import paged_attention
from tests.engine.ops.test_paged_attention import make_case


def on(case: dict[str, object], device: str, dtype: torch.dtype | None = None) -> dict[str, object]:
    out = {}
    for k, v in case.items():
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if dtype is not None and v.is_floating_point():
                v = v.to(dtype)
        out[k] = v
    return out


@pytest.mark.parametrize(("batch", "chunk", "dim", "block_size", "max_ctx"),
                         [(1, 16, 64, 16, 48), (64, 16, 64, 16, 700), (5, 37, 40, 3, 29)])  # fmt: skip
def test_cuda_equals_cpu(cuda_ext: None, batch: int, chunk: int, dim: int, block_size: int, max_ctx: int) -> None:
    case = make_case(batch, chunk, 4, dim, block_size, max_ctx, seed=batch, num_blocks=max_ctx // block_size + 8)
    cpu = paged_attention(**case, use_extension=True)  # type: ignore[arg-type]
    gpu = paged_attention(**on(case, "cuda"), use_extension=True)  # type: ignore[arg-type]
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_half_precision(cuda_ext: None, dtype: torch.dtype) -> None:
    case = make_case(8, 16, 4, 64, 16, 100, seed=2)
    cpu = paged_attention(**case, use_extension=True)  # type: ignore[arg-type]
    gpu = paged_attention(**on(case, "cuda", dtype), use_extension=True)  # type: ignore[arg-type]
    assert gpu.dtype == dtype
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    torch.testing.assert_close(gpu.float().cpu(), cpu, atol=tol, rtol=tol)


def test_cuda_rejects_a_block_outside_the_pool(cuda_ext: None) -> None:
    case = on(make_case(2, 4, 2, 8, 4, 9), "cuda")
    case["block_table"] = torch.full((2, 3), 10_000, device="cuda")
    with pytest.raises(RuntimeError, match="is not a block of the pool"):
        torch.ops.oasr.paged_attention(**case)
