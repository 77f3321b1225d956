"""The half-K/V attention kernel, over float16 K/V and over packed int8 rows (engine/ops/int8_kv.py),
agrees with its float32 torch reference over the stored values (to float32 rounding), gives each
item and query the same numbers whatever the thread count, batch mates or number of queries,
reads strided slices of a store in place, and refuses bad input."""

from __future__ import annotations

import pytest
import torch

from engine.ops.half_kv_attention import half_kv_attention, half_kv_attention_reference
from engine.ops.int8_kv import SCALE_BYTES, pack_int8_rows

pytestmark = pytest.mark.usefixtures("ext")

KINDS = ["float16", "int8"]


def _store(x: torch.Tensor, kind: str) -> torch.Tensor:
    return x.half() if kind == "float16" else pack_int8_rows(x)


def _operands(g: int, h: int, t: int, s: int, d: int, spare: int = 0, seed: int = 0,
              kind: str = "float16") -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    q = torch.randn(g, h, t, d) * 2.0
    # a store longer than what is read, as the decoder cache holds it: rows contiguous, heads strided
    k = _store(torch.randn(g, h, s + spare, d) * 3.0, kind)[:, :, :s]
    v = _store(torch.randn(g, h, s + spare, d), kind)[:, :, :s]
    return q, k, v


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(3, 6, 1, 1403, 64), (2, 6, 5, 250, 64), (1, 20, 3, 1500, 64),
                                   (2, 2, 1, 7, 40), (1, 1, 2, 1, 8), (2, 3, 1, 33, 12)])
def test_matches_the_float32_reference(shape: tuple[int, int, int, int, int], kind: str) -> None:
    g, h, t, s, d = shape
    q, k, v = _operands(g, h, t, s, d, spare=11, kind=kind)
    lengths = torch.tensor([max(1, s - 5 * i) for i in range(g)])
    out, lse = half_kv_attention(q, k, v, lengths, use_extension=True)
    ref_out, ref_lse = half_kv_attention_reference(q, k, v, lengths)
    assert out.dtype == torch.float32 and out.shape == q.shape and lse.shape == q.shape[:-1]
    # sums of up to 1500 float32 terms in another order: far inside float16 storage's own rounding
    torch.testing.assert_close(out, ref_out, atol=3e-5, rtol=1e-4)
    torch.testing.assert_close(lse, ref_lse, atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("queries", [1, 4])
def test_a_shared_tail_continues_each_items_own_rows_in_one_softmax(queries: int, kind: str) -> None:
    """Whisper's 'fit' windows: item g attends over its own lengths[g] positions and then over the
    shared encoded silence from position lengths[g] to its end (none for an item that holds all)."""
    q, k, v = _operands(4, 6, queries, 1500, 64, seed=5, kind=kind)
    torch.manual_seed(6)
    k_tail, v_tail = _store(torch.randn(6, 1500, 64) * 3.0, kind), _store(torch.randn(6, 1500, 64), kind)
    lengths = torch.tensor([1500, 1403, 250, 1])
    out, lse = half_kv_attention(q, k, v, lengths, k_tail=k_tail, v_tail=v_tail, use_extension=True)
    ref_out, ref_lse = half_kv_attention_reference(q, k, v, lengths, None, k_tail, v_tail)
    torch.testing.assert_close(out, ref_out, atol=3e-5, rtol=1e-4)
    torch.testing.assert_close(lse, ref_lse, atol=3e-5, rtol=1e-5)
    whole = torch.cat([k[1:2, :, :1403], k_tail[None, :, 1403:]], dim=2), torch.cat([v[1:2, :, :1403], v_tail[None, :, 1403:]], dim=2)
    spelled, _ = half_kv_attention(q[1:2], *whole, torch.tensor([1500]), use_extension=True)
    assert torch.equal(spelled, out[1:2]), "the tail is read as if it were the item's own rows"


def test_lse_merges_with_another_attention_into_one_softmax() -> None:
    """What the decoder does with the shared silence: two attentions merged by their lse equal one
    attention over both key sets."""
    q, k, v = _operands(2, 6, 1, 300, 64, seed=4)
    lengths = torch.tensor([300, 300])
    out_a, lse_a = half_kv_attention(q, k[:, :, :200], v[:, :, :200], torch.tensor([200, 200]), use_extension=True)
    out_b, lse_b = half_kv_attention(q, k[:, :, 200:], v[:, :, 200:], torch.tensor([100, 100]), use_extension=True)
    total = torch.logaddexp(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - total)[..., None], torch.exp(lse_b - total)[..., None]
    whole, _ = half_kv_attention(q, k, v, lengths, use_extension=True)
    torch.testing.assert_close(out_a * w_a + out_b * w_b, whole, atol=3e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_each_item_and_query_is_computed_alone(kind: str) -> None:
    """Bit for bit: one thread or all, alone or beside other items, one query or several."""
    q, k, v = _operands(4, 6, 5, 700, 64, spare=3, seed=2, kind=kind)
    lengths = torch.tensor([700, 650, 1, 333])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        narrow, narrow_lse = half_kv_attention(q, k, v, lengths, use_extension=True)
    finally:
        torch.set_num_threads(threads)
    torch.set_num_threads(max(2, threads))
    try:
        wide, wide_lse = half_kv_attention(q, k, v, lengths, use_extension=True)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(narrow, wide) and torch.equal(narrow_lse, wide_lse)
    alone, _ = half_kv_attention(q[1:2], k[1:2], v[1:2], lengths[1:2], use_extension=True)
    assert torch.equal(alone, wide[1:2])
    one_query = torch.cat([half_kv_attention(q[:, :, i : i + 1].contiguous(), k, v, lengths, use_extension=True)[0]
                           for i in range(q.shape[2])], dim=2)
    assert torch.equal(one_query, wide)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("head_size", [64, 40])
@pytest.mark.parametrize("with_tail", [False, True])
def test_many_queries_give_what_each_query_gives_alone(head_size: int, with_tail: bool, kind: str) -> None:
    """Bit for bit: a prefill's or an alignment pass's tokens (rows converted once for all the
    queries, a block at a time) get what each token gets alone, rows past a block boundary and
    a segment's last rows (not a whole eight) included."""
    q, k, v = _operands(3, 2, 21, 333, head_size, spare=5, seed=4, kind=kind)
    lengths = torch.tensor([333, 130, 67])
    tail = {}
    if with_tail:
        k_tail = _store(torch.randn(2, 400, head_size) * 3.0, kind)
        tail = {"k_tail": k_tail, "v_tail": _store(torch.randn(2, 400, head_size), kind)}
    many, many_lse = half_kv_attention(q, k, v, lengths, use_extension=True, **tail)
    alone = [half_kv_attention(q[:, :, i : i + 1].contiguous(), k, v, lengths, use_extension=True, **tail)
             for i in range(q.shape[2])]
    assert torch.equal(torch.cat([out for out, _ in alone], dim=2), many)
    assert torch.equal(torch.cat([lse for _, lse in alone], dim=2), many_lse)
    reference, _ = half_kv_attention_reference(q, k, v, lengths, **tail)
    torch.testing.assert_close(many, reference, atol=3e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_positions_past_an_items_length_are_never_read(kind: str) -> None:
    q, k, v = _operands(1, 2, 1, 64, 16, kind=kind)
    lengths = torch.tensor([40])
    before, _ = half_kv_attention(q, k, v, lengths, use_extension=True)
    k, v = k.clone(), v.clone()
    if kind == "int8":  # rows whose scales are NaN and infinity
        k[:, :, 40:, -SCALE_BYTES:] = torch.tensor([float("nan")]).view(torch.int8)
        v[:, :, 40:, -SCALE_BYTES:] = torch.tensor([float("inf")]).view(torch.int8)
    else:
        k[:, :, 40:] = float("nan")
        v[:, :, 40:] = float("inf")
    after, _ = half_kv_attention(q, k, v, lengths, use_extension=True)
    assert torch.equal(before, after)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda q, k, v, n: (q, k.float(), v, n), "k must be Half"),
        (lambda q, k, v, n: (q.half(), k, v, n), "q must be Float"),
        (lambda q, k, v, n: (q, k, v[:, :, :10], n), "v has shape"),
        (lambda q, k, v, n: (q, k, v, n + 100), "lengths holds"),
        (lambda q, k, v, n: (q, k, v, n * 0), "lengths holds"),
        (lambda q, k, v, n: (q, k.repeat_interleave(2, -1)[..., ::2], v, n), "contiguous rows"),
        (lambda q, k, v, n: (q, pack_int8_rows(k.float()), v, n), "v must be Char"),
        (lambda q, k, v, n: (q, k.to(torch.int8), v.to(torch.int8), n), "k has shape"),  # rows without scales
    ],
)
def test_bad_input_is_a_clear_error(change, message: str) -> None:  # type: ignore[no-untyped-def]
    q, k, v = _operands(2, 2, 1, 16, 16)
    args = change(q, k, v, torch.tensor([16, 8]))
    with pytest.raises(RuntimeError, match=message):
        torch.ops.oasr.half_kv_attention(*args, 0.25)

