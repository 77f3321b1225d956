"""Attention of a batch of stream chunks over the K/V each stream keeps in the block pool:
`torch.ops.oasr.paged_attention` (reads the pool through block tables, no dense copy of any
stream's history) or the Python reference (gathers the history, then dense masked attention).

    out = paged_attention(query, key, value, key_pool, value_pool, block_table, context_start,
                          context_lens, chunk_lens, score_bias, scale, block_size)

query/key/value (B, C, H, d): each row's chunk (its own keys come after its history);
key_pool/value_pool (S, H, d): one layer of the pool, slot = block * block_size + offset;
block_table (B, M) int64: each row's blocks in order; context_start (B,): offset of the first
readable frame in the row's first block; context_lens (B,): readable history frames;
chunk_lens (B,): real chunk frames; score_bias (B, H, C, Tc + C) or None: added to q.k before
`scale`, history key p at column p, chunk key c at column Tc + c. Returns (B, C, H, d).
"""

from __future__ import annotations

import torch

from engine.ops.extension import kernel_for
from engine.ops.extension import use_extension as resolve_use_extension

CPU_KERNEL_DTYPES = (torch.float32,)
"""The CPU kernel computes in float32; other dtypes on CPU take the reference."""


def paged_attention_reference(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor,
    block_table: torch.Tensor, context_start: torch.Tensor, context_lens: torch.Tensor, chunk_lens: torch.Tensor,
    score_bias: torch.Tensor | None, scale: float, block_size: int,
) -> torch.Tensor:  # fmt: skip
    b, c = query.shape[:2]
    dev = query.device
    tc = score_bias.shape[-1] - c if score_bias is not None else (int(context_lens.max()) if b else 0)
    frame = torch.arange(tc, device=dev).unsqueeze(0)  # (1, Tc)
    ctx_valid = frame < context_lens.unsqueeze(1)  # (B, Tc)
    pos = torch.where(ctx_valid, context_start.unsqueeze(1) + frame, 0)
    slots = (block_table.gather(1, pos // block_size) * block_size + pos % block_size).clamp_min(0)
    keys = torch.cat([key_pool[slots], key], dim=1)  # (B, Tc + C, H, d)
    values = torch.cat([value_pool[slots], value], dim=1)
    chunk_valid = torch.arange(c, device=dev).unsqueeze(0) < chunk_lens.unsqueeze(1)
    masked = ~torch.cat([ctx_valid, chunk_valid], dim=1)[:, None, None, :]  # (B, 1, 1, Tk)
    scores = query.transpose(1, 2) @ keys.permute(0, 2, 3, 1)  # (B, H, C, Tk)
    if score_bias is not None:
        scores = scores + score_bias
    scores = scores * scale
    attn = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1).masked_fill(masked, 0.0)
    return (attn @ values.transpose(1, 2)).transpose(1, 2)  # (B, C, H, d)


def paged_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor,
    block_table: torch.Tensor, context_start: torch.Tensor, context_lens: torch.Tensor, chunk_lens: torch.Tensor,
    score_bias: torch.Tensor | None, scale: float, block_size: int, *, use_extension: bool | None = None,
) -> torch.Tensor:  # fmt: skip
    """The compiled kernel where one exists for these tensors (CPU float32, or CUDA), else the
    reference; `use_extension` forces either."""
    args = (query, key, value, key_pool, value_pool, block_table, context_start, context_lens, chunk_lens,
            score_bias, scale, block_size)  # fmt: skip
    if use_extension is None:
        use_extension = kernel_for(query.device) and (query.is_cuda or query.dtype in CPU_KERNEL_DTYPES)
    if resolve_use_extension(use_extension):
        return torch.ops.oasr.paged_attention(*args)
    return paged_attention_reference(*args)
