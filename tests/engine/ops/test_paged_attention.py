"""Paged attention: the compiled kernel against the Python reference (dense gather + masked
softmax) for batches 1..64 with ragged histories spread over shuffled pool blocks, partial
chunks, with and without a score bias; bad arguments raise RuntimeError."""

from __future__ import annotations

import math

import pytest
import torch

from engine.ops import paged_attention, paged_attention_reference

ATOL = RTOL = 1e-5
"""float32: the two sides sum the same products in different orders (observed error ~1e-6)."""


def make_case(
    batch: int, chunk: int, heads: int, dim: int, block_size: int, max_ctx: int, seed: int = 0,
    bias: bool = True, num_blocks: int = 96,
) -> dict[str, object]:  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    slots = num_blocks * block_size
    ctx = torch.randint(0, max_ctx + 1, (batch,), generator=g)
    ctx[:1] = max_ctx
    start = torch.randint(0, block_size, (batch,), generator=g)
    width = (max_ctx + 2 * block_size - 1) // block_size
    assert width <= num_blocks
    table = torch.stack([torch.randperm(num_blocks, generator=g)[:width] for _ in range(batch)]) if batch else \
        torch.zeros(0, width, dtype=torch.long)  # fmt: skip
    chunk_lens = torch.randint(1, chunk + 1, (batch,), generator=g)
    chunk_lens[:1] = chunk

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    return {
        "query": randn(batch, chunk, heads, dim), "key": randn(batch, chunk, heads, dim),
        "value": randn(batch, chunk, heads, dim), "key_pool": randn(slots, heads, dim),
        "value_pool": randn(slots, heads, dim), "block_table": table, "context_start": start,
        "context_lens": ctx, "chunk_lens": chunk_lens,
        "score_bias": randn(batch, heads, chunk, max_ctx + chunk) if bias else None,
        "scale": 1 / math.sqrt(dim), "block_size": block_size,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("batch", "chunk", "heads", "dim", "block_size", "max_ctx", "bias"),
    [
        (1, 16, 4, 64, 16, 48, True),
        (5, 4, 2, 8, 5, 37, True),
        (64, 8, 4, 16, 8, 64, True),
        (7, 16, 1, 32, 1, 23, False),
        (3, 1, 3, 24, 4, 0, True),  # no history at all
    ],
)
def test_kernel_equals_reference(ext: None, two_threads: None, batch: int, chunk: int, heads: int, dim: int,
                                 block_size: int, max_ctx: int, bias: bool) -> None:  # fmt: skip
    case = make_case(batch, chunk, heads, dim, block_size, max_ctx, seed=batch, bias=bias)
    got = paged_attention(**case, use_extension=True)  # type: ignore[arg-type]
    want = paged_attention_reference(**case)  # type: ignore[arg-type]
    assert got.shape == want.shape == (batch, chunk, heads, dim)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


def test_padding_beyond_a_row_is_never_read(ext: None) -> None:
    case = make_case(4, 8, 2, 16, 4, 20, seed=3)
    base = paged_attention(**case, use_extension=True)  # type: ignore[arg-type]
    poisoned = dict(case)
    query = case["query"].clone()  # type: ignore[union-attr]
    key, value = case["key"].clone(), case["value"].clone()  # type: ignore[union-attr]
    lens = case["chunk_lens"]
    for row, n in enumerate(lens.tolist()):  # type: ignore[union-attr]
        key[row, n:] = float("nan")
        value[row, n:] = float("nan")
    poisoned.update(query=query, key=key, value=value)
    got = paged_attention(**poisoned, use_extension=True)  # type: ignore[arg-type]
    assert torch.equal(got, base)


def test_a_row_with_no_key_gives_zeros(ext: None) -> None:
    case = make_case(2, 4, 2, 8, 4, 0, seed=1)
    case["chunk_lens"] = torch.tensor([4, 0])
    got = paged_attention(**case, use_extension=True)  # type: ignore[arg-type]
    want = paged_attention_reference(**case)  # type: ignore[arg-type]
    assert torch.equal(got[1], torch.zeros_like(got[1])) and torch.equal(want[1], torch.zeros_like(want[1]))
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


def test_empty_batch(ext: None) -> None:
    case = make_case(0, 4, 2, 8, 4, 0)
    assert paged_attention(**case, use_extension=True).shape == (0, 4, 2, 8)  # type: ignore[arg-type]


def test_other_dtypes_on_cpu_take_the_reference() -> None:
    case = make_case(2, 4, 2, 8, 4, 9)
    half = {k: v.bfloat16() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in case.items()}
    got = paged_attention(**half)  # type: ignore[arg-type]
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), paged_attention_reference(**case), atol=0.05, rtol=0.05)  # type: ignore[arg-type]


def bad(change: dict[str, object]) -> dict[str, object]:
    return {**make_case(2, 4, 2, 8, 4, 9, seed=5), **change}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"query": torch.zeros(2, 4, 2, 8, dtype=torch.float64)}, "query must be float32"),
        ({"query": torch.zeros(2, 4, 8)}, r"query must be \(batch, chunk, heads, head_dim\)"),
        ({"key": torch.zeros(2, 4, 2, 7)}, "key has shape"),
        ({"value_pool": torch.zeros(96 * 4, 2, 8, dtype=torch.float16)}, "value_pool must be Float"),
        ({"block_size": 5}, "does not divide"),
        ({"block_table": torch.full((2, 3), 96)}, "is not a block of the pool"),
        ({"block_table": torch.zeros(2, 1, dtype=torch.long)}, "past its 1 blocks"),
        ({"context_lens": torch.tensor([9, -1])}, "reads context frames"),
        ({"chunk_lens": torch.tensor([5, 1])}, "chunk_lens holds 5"),
        ({"context_start": torch.tensor([0, 1], dtype=torch.int32)}, "context_start must be Long"),
        ({"score_bias": torch.zeros(2, 2, 4, 6)}, "context columns"),
        ({"scale": float("nan")}, "scale must be finite"),
    ],
)
def test_bad_arguments_raise_runtime_errors(ext: None, change: dict[str, object], message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        torch.ops.oasr.paged_attention(**bad(change))


def test_the_cpu_kernel_refuses_half_precision(ext: None) -> None:
    case = {k: v.half() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in bad({}).items()}
    with pytest.raises(RuntimeError, match="CPU kernel takes float32"):
        torch.ops.oasr.paged_attention(**case)


def test_schema_and_fake_implementation(ext: None) -> None:
    torch.library.opcheck(torch.ops.oasr.paged_attention.default, (), make_case(3, 4, 2, 8, 4, 9),
                          test_utils=("test_schema", "test_faketensor"))  # fmt: skip
