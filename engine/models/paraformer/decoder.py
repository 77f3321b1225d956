"""The one-pass Paraformer decoder (FunASR's ParaformerSANMDecoder).

Its input is the CIF's acoustic embeddings, one per token, and every token is decoded at once.
Each block (pre-norm): y = FFN(LN(x)) (an FFN with a LayerNorm inside), then x + FSMN(LN(y)) (an
FSMN memory over the token axis, no attention among tokens), then x + cross-attention(LN(x),
encoder output). Blocks past `att_layer_num` skip the cross-attention; a last block is a lone
FFN with no residual. Parameter names follow FunASR's state dict (`decoders`, `decoders2`,
`decoders3`, `after_norm`, `output_layer`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.paraformer.config import DecoderConfig
from engine.models.paraformer.encoder import LAYER_NORM_EPS, fsmn_memory, fsmn_padding


class FSMNSelf(nn.Module):
    """The decoder's 'self-attention': an FSMN memory block only."""

    def __init__(self, d: int, kernel_size: int, shift: int) -> None:
        super().__init__()
        self.fsmn_block = nn.Conv1d(d, d, kernel_size, groups=d, bias=False)
        self.padding = fsmn_padding(kernel_size, shift)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return fsmn_memory(self.fsmn_block, self.padding, x, mask)


class CrossAttention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.h, self.d_k = cfg.attention_heads, d // cfg.attention_heads
        self.linear_q = nn.Linear(d, d)
        self.linear_k_v = nn.Linear(d, 2 * d)
        self.linear_out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        return self.attend(x, self.memory_kv(memory), key_mask)

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """memory (B, T, D) -> its keys and values (B, H, T, d_k)."""
        b, t, _ = memory.shape
        k, v = (z.reshape(b, t, self.h, self.d_k).transpose(1, 2)
                for z in self.linear_k_v(memory).split(self.h * self.d_k, dim=-1))  # fmt: skip
        return k, v

    def attend(self, x: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], key_mask: torch.Tensor) -> torch.Tensor:
        """x (B, N, D) queries over keys and values (B, H, T, d_k), key_mask (B, 1, 1, T)."""
        b, n, _ = x.shape
        q = self.linear_q(x).reshape(b, n, self.h, self.d_k).transpose(1, 2)  # (B, H, N, d_k)
        att = F.scaled_dot_product_attention(q, kv[0], kv[1], attn_mask=key_mask)
        out: torch.Tensor = self.linear_out(att.transpose(1, 2).reshape(b, n, self.h * self.d_k))
        return out


class DecoderFeedForward(nn.Module):
    def __init__(self, d: int, units: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d, units)
        self.norm = nn.LayerNorm(units, eps=LAYER_NORM_EPS)
        self.w_2 = nn.Linear(units, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w_2(self.norm(torch.relu(self.w_1(x))))
        return out


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig, fsmn_shift: int | None, cross: bool) -> None:
        """fsmn_shift None: no FSMN (and no residual: the last, FFN-only block)."""
        super().__init__()
        d = cfg.d_model
        self.feed_forward = DecoderFeedForward(d, cfg.linear_units)
        self.norm1 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.self_attn = None if fsmn_shift is None else FSMNSelf(d, cfg.kernel_size, fsmn_shift)
        if self.self_attn is not None:
            self.norm2 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.src_attn = CrossAttention(cfg) if cross else None
        if self.src_attn is not None:
            self.norm3 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, memory: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        y = self.feed_forward(self.norm1(x))
        if self.self_attn is None:
            out: torch.Tensor = y
            return out
        x = x + self.self_attn(self.norm2(y), mask)
        if self.src_attn is not None:
            x = x + self.src_attn(self.norm3(x), memory, key_mask)
        return x


class ParaformerDecoder(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.decoders = nn.ModuleList([DecoderLayer(cfg, cfg.sanm_shift, cross=True) for _ in range(cfg.att_layer_num)])
        self.decoders2 = nn.ModuleList(
            [DecoderLayer(cfg, 0, cross=False) for _ in range(max(cfg.num_blocks - cfg.att_layer_num, 0))]
        )
        self.decoders3 = nn.ModuleList([DecoderLayer(cfg, None, cross=False)])
        self.after_norm = nn.LayerNorm(cfg.d_model, eps=LAYER_NORM_EPS)
        self.output_layer = nn.Linear(cfg.d_model, cfg.vocab_size) if cfg.output_layer else None
        self.embed = nn.Sequential(nn.Embedding(cfg.vocab_size, cfg.d_model)) if cfg.embed else None

    def forward(self, embeds: torch.Tensor, token_counts: torch.Tensor, memory: torch.Tensor,
                memory_lengths: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """embeds (B, N, D) acoustic embeddings, token_counts (B,), memory (B, T, D) encoder
        output -> (B, N, D) hidden states after the final norm (rows past a count are
        meaningless); `logprobs` turns them into token log-probabilities."""
        n, t = embeds.shape[1], memory.shape[1]
        mask = (torch.arange(n, device=embeds.device)[None, :] < token_counts[:, None]).to(embeds.dtype)[:, :, None]
        key_mask = (torch.arange(t, device=memory.device)[None, :] < memory_lengths[:, None])[:, None, None, :]
        x = embeds
        for layer in (*self.decoders, *self.decoders2, *self.decoders3):
            x = layer(x, mask, memory, key_mask)
        out: torch.Tensor = self.after_norm(x)
        return out

    def logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        assert self.output_layer is not None, "a decoder without an output layer gives hidden states only"
        return torch.log_softmax(self.output_layer(hidden), dim=-1)
