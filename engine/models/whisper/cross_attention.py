"""Decoder cross-attention over a `DecoderCache`'s runs of items (cache.py): each item's own
audio positions, and the one copy of the encoded silence that completes a short ('fit') window's
30 s context. Offline items attend item by item (their numbers do not depend on batch mates);
live items of one run attend in one batched softmax, the silence K/V read once for all of them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.models.whisper.cache import CrossRun, DecoderCache
from engine.ops.half_kv_attention import half_kv_attention


def attend_run(q: Tensor, layer: int, cache: DecoderCache, run: CrossRun, silence_bias: Tensor | None) -> Tensor:
    """Attention (G, H, T, Dh) of queries q (G, H, T, Dh) over the cross K/V of `run`'s items.
    Offline items attend over their own positions and, in one softmax merged from two calls,
    the shared silence after them. Live items with a short context attend over their own positions
    followed by the shared silence, in one softmax (`silence_bias` masks each item's part):
    the silence K/V are read once for all items, which is what makes a batch of short live
    windows cheap (the step is memory-bound)."""
    items, held = run.items, run.held
    if _half_store(cache):
        return _attend_half(q, layer, cache, run)
    if held is not None:
        k, v = cache.cross_k[layer][items, :, :held], cache.cross_v[layer][items, :, :held]
        if not run.silence:
            return F.scaled_dot_product_attention(q, k, v)
        assert cache.silence_k is not None and cache.silence_v is not None
        g = items.stop - items.start
        sk = cache.silence_k[layer][None, :, held:].expand(g, -1, -1, -1)
        sv = cache.silence_v[layer][None, :, held:].expand(g, -1, -1, -1)
        if q.device.type != "cpu":  # one fused kernel over the K/V spelled out (GPU memory is fast)
            return F.scaled_dot_product_attention(q, torch.cat([k, sk], dim=2), torch.cat([v, sv], dim=2))
        return _merge_attention(_attention_with_lse(q, k, v), _attention_with_lse(q, sk, sv))
    k, v = cache.cross_k[layer][items, :, : run.length], cache.cross_v[layer][items, :, : run.length]
    assert cache.silence_k is not None and cache.silence_v is not None and silence_bias is not None
    n, h, t, d = q.shape
    q = q * d**-0.5
    sk, sv = cache.silence_k[layer], cache.silence_v[layer]
    s_sil = (q.permute(1, 0, 2, 3).reshape(h, n * t, d) @ sk.transpose(-1, -2)).view(h, n, t, -1)
    scores = torch.cat([q @ k.transpose(-1, -2), s_sil.permute(1, 0, 2, 3)], dim=-1).float() + silence_bias
    p = torch.softmax(scores, dim=-1).to(q.dtype)
    s = k.shape[2]
    out = p[..., :s] @ v
    p_sil = p[..., s:].permute(1, 0, 2, 3).reshape(h, n * t, -1)
    return out + (p_sil @ sv).view(h, n, t, d).permute(1, 0, 2, 3)


def _half_store(cache: DecoderCache) -> bool:
    """float16 or packed int8 K/V under float32 states: a model with `cross_kv_dtype` (a float16
    model's K/V are float16 too, and attend in float16 as they are)."""
    return (bool(cache.cross_k) and cache.cross_k[0].dtype in (torch.float16, torch.int8)
            and cache.self_k[0].dtype == torch.float32)


def _attend_half(q: Tensor, layer: int, cache: DecoderCache, run: CrossRun) -> Tensor:
    """`attend_run` over float16 or int8 K/V (a model with `cross_kv_dtype`): in one kernel call, each item
    over its own positions and then, where its context goes on with the shared silence, over the
    silence's positions after them, in one softmax per (item, head)."""
    items = run.items
    length = run.held if run.held is not None else run.length
    k, v = cache.cross_k[layer][items, :, :length], cache.cross_v[layer][items, :, :length]
    held = cache.held[items] if run.held is None and cache.held else [length] * (items.stop - items.start)
    lengths = torch.tensor(held, dtype=torch.long)
    if run.held is not None and not run.silence:
        return half_kv_attention(q, k, v, lengths)[0]
    assert cache.silence_k is not None and cache.silence_v is not None
    return half_kv_attention(q, k, v, lengths, k_tail=cache.silence_k[layer], v_tail=cache.silence_v[layer])[0]


def cross_runs(cache: DecoderCache, queries: int = 1) -> list[tuple[CrossRun, Tensor | None]]:
    """The cache's runs (`DecoderCache.item_runs`) for `queries` positions per row, each
    batched live one with its (G, 1, 1, S + 1500) additive mask over [own positions, silence
    positions] per item (float32 K/V: float16 and int8 ones are read by a kernel that needs none)."""
    runs: list[tuple[CrossRun, Tensor | None]] = []
    half = _half_store(cache)
    for run in cache.item_runs(batch_live=queries == 1):
        if run.held is not None or half:
            runs.append((run, None))
            continue
        assert cache.silence_k is not None
        device = cache.cross_k[0].device
        lengths = torch.tensor(cache.held[run.items], dtype=torch.long, device=device)[:, None, None, None]
        real = torch.arange(run.length, device=device)[None, None, None, :] < lengths
        silence = torch.arange(cache.silence_k[0].shape[1], device=device)[None, None, None, :] >= lengths
        keep = torch.cat([real, silence], dim=-1)
        runs.append((run, torch.zeros(keep.shape, device=device).masked_fill_(~keep, float("-inf"))))
    return runs


def _attention_with_lse(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax attention (G, H, T, Dh) of q over k, v and its log-sum-exp (G, H, T) in float32,
    with the CPU flash kernel: one call per (item, head), so an item's numbers do not depend on
    the other items of the call, and K/V expanded along G (the shared silence) are read in place
    rather than copied per item."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
    return out, lse.float()


def _merge_attention(first: tuple[Tensor, Tensor], second: tuple[Tensor, Tensor]) -> Tensor:
    """One softmax over the keys of two attentions, from their outputs and log-sum-exps."""
    (out_a, lse_a), (out_b, lse_b) = first, second
    top = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - top)[..., None], torch.exp(lse_b - top)[..., None]
    return ((out_a.float() * w_a + out_b.float() * w_b) / (w_a + w_b)).to(out_a.dtype)


__all__ = ["attend_run", "cross_runs"]
