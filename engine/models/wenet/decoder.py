"""WeNet's attention decoders (transformer / bitransformer), used only to rescore the CTC
n-best of a finished stream against its whole encoder output (U2/U2++ "attention rescoring").
Module names match WeNet's state dict (`decoder.decoders.N.self_attn.linear_q`,
`decoder.left_decoder.*` / `decoder.right_decoder.*` for U2++)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from engine.models.wenet.model import sinusoid


@dataclass(frozen=True)
class DecoderConfig:
    kind: str = "bitransformer"
    """'transformer' (U2: left-to-right) or 'bitransformer' (U2++: plus right-to-left)."""
    vocab_size: int = 5000
    d_model: int = 256
    attention_heads: int = 4
    linear_units: int = 2048
    num_blocks: int = 6
    r_num_blocks: int = 0
    normalize_before: bool = True
    norm_eps: float = 1e-5


class MultiHeadedAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.h, self.d_k = heads, dim // heads
        self.linear_q = nn.Linear(dim, dim)
        self.linear_k = nn.Linear(dim, dim)
        self.linear_v = nn.Linear(dim, dim)
        self.linear_out = nn.Linear(dim, dim)

    def forward(self, q: torch.Tensor, kv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q (B, Tq, D), kv (B, Tk, D), mask (B, Tq|1, Tk) bool -> (B, Tq, D)."""
        b = q.shape[0]
        q_ = self.linear_q(q).view(b, -1, self.h, self.d_k).transpose(1, 2)  # (B, H, Tq, d_k)
        k_ = self.linear_k(kv).view(b, -1, self.h, self.d_k).transpose(1, 2)
        v_ = self.linear_v(kv).view(b, -1, self.h, self.d_k).transpose(1, 2)
        scores = q_ @ k_.transpose(-2, -1) / math.sqrt(self.d_k)
        hidden = ~mask.unsqueeze(1)
        attn = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1).masked_fill(hidden, 0.0)
        x = (attn @ v_).transpose(1, 2).reshape(b, -1, self.h * self.d_k)
        return self.linear_out(x)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(dim, hidden)
        self.w_2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(torch.relu(self.w_1(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.self_attn = MultiHeadedAttention(d, cfg.attention_heads)
        self.src_attn = MultiHeadedAttention(d, cfg.attention_heads)
        self.feed_forward = FeedForward(d, cfg.linear_units)
        self.norm1 = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.norm2 = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.norm3 = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.normalize_before = cfg.normalize_before

    def forward(
        self, x: torch.Tensor, tgt_mask: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor
    ) -> torch.Tensor:
        pre = self.normalize_before
        h = self.norm1(x) if pre else x
        x = x + self.self_attn(h, h, tgt_mask)
        x = x if pre else self.norm1(x)
        h = self.norm2(x) if pre else x
        x = x + self.src_attn(h, memory, memory_mask)
        x = x if pre else self.norm2(x)
        h = self.norm3(x) if pre else x
        x = x + self.feed_forward(h)
        return x if pre else self.norm3(x)


class TransformerDecoder(nn.Module):
    def __init__(self, cfg: DecoderConfig, num_blocks: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Sequential(nn.Embedding(cfg.vocab_size, cfg.d_model))
        self.decoders = nn.ModuleList(DecoderLayer(cfg) for _ in range(num_blocks))
        self.after_norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.output_layer = nn.Linear(cfg.d_model, cfg.vocab_size)

    def forward(self, memory: torch.Tensor, tokens: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """memory (B, T, D) encoder output, tokens (B, L) starting with sos -> log-probs (B, L, V)."""
        b, length = tokens.shape
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model)
        x = x + sinusoid(torch.arange(length, device=x.device), self.cfg.d_model).to(x.dtype)
        valid = torch.arange(length, device=x.device).unsqueeze(0) < lens.unsqueeze(1)  # (B, L)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        tgt_mask = valid.unsqueeze(1) & causal.unsqueeze(0)  # (B, L, L)
        memory_mask = torch.ones(b, 1, memory.shape[1], dtype=torch.bool, device=x.device)
        for layer in self.decoders:
            x = layer(x, tgt_mask, memory, memory_mask)
        if self.cfg.normalize_before:
            x = self.after_norm(x)
        return torch.log_softmax(self.output_layer(x).float(), dim=-1)


class BiTransformerDecoder(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.left_decoder = TransformerDecoder(cfg, cfg.num_blocks)
        self.right_decoder = TransformerDecoder(cfg, cfg.r_num_blocks)


def build_decoder(cfg: DecoderConfig) -> nn.Module:
    if cfg.kind == "bitransformer":
        return BiTransformerDecoder(cfg)
    return TransformerDecoder(cfg, cfg.num_blocks)


@torch.inference_mode()
def rescore(
    decoder: nn.Module, encoder_out: torch.Tensor, hyps: list[tuple[int, ...]], ctc_scores: list[float],
    sos: int, eos: int, ctc_weight: float, reverse_weight: float,
) -> list[float]:  # fmt: skip
    """Attention-rescoring scores of `hyps` for one utterance (encoder_out (T, D)): the decoder's
    log P(hyp + eos), right-to-left blended in by `reverse_weight`, plus ctc_weight x CTC score."""
    left = decoder.left_decoder if isinstance(decoder, BiTransformerDecoder) else decoder
    n = len(hyps)
    lens = torch.tensor([len(h) + 1 for h in hyps], device=encoder_out.device)
    width = int(lens.max())
    memory = encoder_out.unsqueeze(0).expand(n, -1, -1)

    def score(dec: nn.Module, seqs: list[tuple[int, ...]]) -> list[float]:
        tokens = torch.full((n, width), eos, dtype=torch.long, device=encoder_out.device)  # eos pads, as WeNet's
        tokens[:, 0] = sos
        for i, s in enumerate(seqs):
            tokens[i, 1 : len(s) + 1] = torch.tensor(s, dtype=torch.long)
        logp = dec(memory, tokens, lens).cpu()  # (N, L, V)
        out = []
        for i, s in enumerate(seqs):
            targets = [*s, eos]  # predict each token, then eos
            out.append(float(sum(logp[i, j, t] for j, t in enumerate(targets))))
        return out

    scores = score(left, hyps)
    if isinstance(decoder, BiTransformerDecoder) and reverse_weight > 0:
        right = score(decoder.right_decoder, [tuple(reversed(h)) for h in hyps])
        scores = [s * (1 - reverse_weight) + r * reverse_weight for s, r in zip(scores, right, strict=True)]
    return [s + ctc_weight * c for s, c in zip(scores, ctc_scores, strict=True)]
