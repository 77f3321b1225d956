"""WeNet U2/U2++ Conformer encoder + CTC head, with module names matching WeNet's state dict.

Two forwards over the same weights:
- `forward_full`: the whole utterance under a chunk attention mask (WeNet's `forward` with
  `decoding_chunk_size`), the reference the streaming path must reproduce;
- `forward_chunk_paged`: one chunk for a batch of streams at different offsets; each stream's
  past K/V is read from a `BlockPool` through its block table (engine.ops.paged_attention) and
  the chunk's K/V written back.

Relative-position attention follows WeNet: no rel_shift, the position term uses the key's
absolute sinusoidal encoding, so a streamed chunk sees exactly what the masked full forward sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.wenet.config import RIGHT_CONTEXT, SUBSAMPLING, ConformerConfig
from engine.ops import paged_attention


def window_frames(chunk_size: int) -> int:
    """Feature frames one full chunk of `chunk_size` encoder frames consumes."""
    return (chunk_size - 1) * SUBSAMPLING + RIGHT_CONTEXT + 1


def subsampled_length(num_feats: int) -> int:
    return max(0, ((num_feats - 1) // 2 - 1) // 2)


def sinusoid(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """WeNet's fixed positional encoding at integer `positions` (any shape) -> (..., dim), float32.
    Computed on the fly (same float ops as WeNet's table) so positions are unbounded."""
    div = torch.exp(
        torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) * -(math.log(10000.0) / dim)
    )
    angle = positions.to(torch.float32).unsqueeze(-1) * div
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(-2)


def chunk_attention_mask(
    size: int, chunk_size: int, num_left_chunks: int, device: torch.device
) -> torch.Tensor:
    """(size, size) bool: frame i sees its own chunk and `num_left_chunks` chunks before (-1: all)."""
    idx = torch.arange(size, device=device)
    chunk = idx // chunk_size
    key_chunk = chunk.unsqueeze(0)
    visible = key_chunk <= chunk.unsqueeze(1)
    if num_left_chunks >= 0:
        visible &= key_chunk >= chunk.unsqueeze(1) - num_left_chunks
    return visible


class GlobalCMVN(nn.Module):
    mean: torch.Tensor
    istd: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("istd", torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * self.istd


class Conv2dSubsampling4(nn.Module):
    def __init__(self, idim: int, odim: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Sequential(nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim))
        self.xscale = math.sqrt(odim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x.unsqueeze(1))  # (B, C, T', F')
        b, c, t, f = x.shape
        x = self.out(x.transpose(1, 2).reshape(b, t, c * f))  # (B, T', D)
        return x * self.xscale


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int, activation: nn.Module) -> None:
        super().__init__()
        self.w_1 = nn.Linear(dim, hidden)
        self.w_2 = nn.Linear(hidden, dim)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.activation(self.w_1(x)))


class RelPositionAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.h, self.d_k = heads, dim // heads
        self.linear_q = nn.Linear(dim, dim)
        self.linear_k = nn.Linear(dim, dim)
        self.linear_v = nn.Linear(dim, dim)
        self.linear_out = nn.Linear(dim, dim)
        self.linear_pos = nn.Linear(dim, dim, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.d_k))

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.h, self.d_k)
        k = self.linear_k(x).view(b, t, self.h, self.d_k)
        v = self.linear_v(x).view(b, t, self.h, self.d_k)
        return q, k, v  # (B, T, H, d_k)

    def _attend(self, scores: torch.Tensor, mask: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """scores (B, H, Tq, Tk), mask (B, 1|Tq, Tk) bool, v (B, H, Tk, d_k) -> (B, Tq, D)."""
        mask = ~mask.unsqueeze(1)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1).masked_fill(mask, 0.0)
        x = attn @ v  # (B, H, Tq, d_k)
        b, _, t, _ = x.shape
        return self.linear_out(x.transpose(1, 2).reshape(b, t, self.h * self.d_k))

    def forward_full(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        """WeNet's formulation: p = linear_pos(pe) per key position; mask (B, T, T)."""
        q, k, v = self._qkv(x)
        p = self.linear_pos(pos_emb).view(pos_emb.shape[0], -1, self.h, self.d_k).transpose(1, 2)
        ac = (q + self.pos_bias_u).transpose(1, 2) @ k.permute(0, 2, 3, 1)
        bd = (q + self.pos_bias_v).transpose(1, 2) @ p.transpose(-2, -1)
        return self._attend((ac + bd) / math.sqrt(self.d_k), mask, v.transpose(1, 2))

    def forward_paged(
        self, x: torch.Tensor, batch: PagedBatch, k_pool: torch.Tensor, v_pool: torch.Tensor
    ) -> torch.Tensor:
        """x (B, C, D): one chunk per stream. Past K/V are read from the pool through the rows'
        block tables (engine.ops.paged_attention); the chunk's own K/V are written to their
        slots afterwards."""
        b, c, _ = x.shape
        q, k, v = self._qkv(x)
        # (q + v_bias) . (W_pos,h pe_j) == (W_pos,h^T (q + v_bias)) . pe_j: projecting the C queries
        # instead of the Tk key encodings costs H*C*D instead of Tk*D*D per stream.
        qv = torch.einsum(
            "bchd,hde->bhce", q + self.pos_bias_v, self.linear_pos.weight.view(self.h, self.d_k, -1)
        )
        bd = qv @ batch.pos_emb.transpose(1, 2).unsqueeze(1)  # (B, H, C, Tc + C)
        out = paged_attention(
            q + self.pos_bias_u, k, v, k_pool, v_pool, batch.block_table, batch.context_start,
            batch.context_lens, batch.chunk_lens, bd, 1.0 / math.sqrt(self.d_k), batch.block_size,
        )  # fmt: skip
        k_pool[batch.write_slots] = k.reshape(b * c, self.h, self.d_k)[batch.write_rows]
        v_pool[batch.write_slots] = v.reshape(b * c, self.h, self.d_k)[batch.write_rows]
        return self.linear_out(out.reshape(b, c, self.h * self.d_k))


class ConvolutionModule(nn.Module):
    """Causal Conformer convolution: its streaming cache is the last `lorder` inputs."""

    def __init__(self, dim: int, kernel: int, norm: str, activation: nn.Module, eps: float) -> None:
        super().__init__()
        self.lorder = kernel - 1
        self.pointwise_conv1 = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise_conv = nn.Conv1d(dim, dim, kernel, groups=dim)
        self.use_layer_norm = norm == "layer_norm"
        self.norm: nn.Module = nn.LayerNorm(dim, eps=eps) if self.use_layer_norm else nn.BatchNorm1d(dim)
        self.pointwise_conv2 = nn.Conv1d(dim, dim, 1)
        self.activation = activation

    def forward(
        self, x: torch.Tensor, valid: torch.Tensor, cache: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D), valid (B, T) bool, cache (B, D, lorder) or None (zeros) -> (y, x_cat)
        where x_cat (B, D, lorder + T) holds the cache followed by the masked inputs."""
        x = x.masked_fill(~valid.unsqueeze(-1), 0.0).transpose(1, 2)  # (B, D, T)
        if cache is None:
            x = F.pad(x, (self.lorder, 0))
        else:
            x = torch.cat([cache, x], dim=2)
        x_cat = x
        x = F.glu(self.pointwise_conv1(x), dim=1)
        x = self.depthwise_conv(x)
        if self.use_layer_norm:
            x = self.activation(self.norm(x.transpose(1, 2))).transpose(1, 2)
        else:
            x = self.activation(self.norm(x))
        x = self.pointwise_conv2(x).transpose(1, 2)
        return x.masked_fill(~valid.unsqueeze(-1), 0.0), x_cat


class ConformerEncoderLayer(nn.Module):
    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d, eps = cfg.output_size, cfg.norm_eps
        act = _activation(cfg.activation_type)
        self.self_attn = RelPositionAttention(d, cfg.attention_heads)
        self.feed_forward = FeedForward(d, cfg.linear_units, act)
        self.feed_forward_macaron = FeedForward(d, cfg.linear_units, act) if cfg.macaron_style else None
        self.conv_module = (
            ConvolutionModule(d, cfg.cnn_module_kernel, cfg.cnn_module_norm, act, eps)
            if cfg.use_cnn_module
            else None
        )
        self.norm_ff = nn.LayerNorm(d, eps=eps)
        self.norm_mha = nn.LayerNorm(d, eps=eps)
        if cfg.macaron_style:
            self.norm_ff_macaron = nn.LayerNorm(d, eps=eps)
        if cfg.use_cnn_module:
            self.norm_conv = nn.LayerNorm(d, eps=eps)
            self.norm_final = nn.LayerNorm(d, eps=eps)
        self.ff_scale = 0.5 if cfg.macaron_style else 1.0
        self.normalize_before = cfg.normalize_before

    def _residual(self, x: torch.Tensor, norm: nn.Module, fn: object, scale: float = 1.0) -> torch.Tensor:
        y = fn(norm(x) if self.normalize_before else x)  # type: ignore[operator]
        x = x + scale * y
        return x if self.normalize_before else norm(x)

    def forward(
        self, x: torch.Tensor, attend: object, valid: torch.Tensor, cnn_cache: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`attend(x_normed) -> attention output` carries the full or paged attention."""
        if self.feed_forward_macaron is not None:
            x = self._residual(x, self.norm_ff_macaron, self.feed_forward_macaron, self.ff_scale)
        x = self._residual(x, self.norm_mha, attend)
        x_cat = None
        if self.conv_module is not None:
            conv = self.conv_module

            def run_conv(h: torch.Tensor) -> torch.Tensor:
                nonlocal x_cat
                y, x_cat = conv(h, valid, cnn_cache)
                return y

            x = self._residual(x, self.norm_conv, run_conv)
        x = self._residual(x, self.norm_ff, self.feed_forward, self.ff_scale)
        if self.conv_module is not None:
            x = self.norm_final(x)
        return x, x_cat


@dataclass
class PagedBatch:
    """Index tensors describing one batched streaming chunk (built by the runner)."""

    block_table: torch.Tensor
    """(B, M) long: each row's pool blocks, oldest first (padding: 0)."""
    context_start: torch.Tensor
    """(B,) long: offset of each row's first readable past frame in its first block."""
    context_lens: torch.Tensor
    """(B,) long: past frames each row attends to."""
    block_size: int
    """Frames per pool block."""
    key_mask: torch.Tensor
    """(B, 1, Tc + C) bool: which past frames and chunk frames are real."""
    pos_emb: torch.Tensor
    """(B, Tc + C, D): sinusoidal encoding of each key's absolute position."""
    chunk_valid: torch.Tensor
    """(B, C) bool: real frames of each row's chunk."""
    chunk_lens: torch.Tensor
    """(B,) long: number of real chunk frames per row."""
    write_rows: torch.Tensor
    """(N,) long: flat (b * C + i) index of each real chunk frame."""
    write_slots: torch.Tensor
    """(N,) long: pool slot each real chunk frame is written to."""


class ConformerEncoder(nn.Module):
    def __init__(self, cfg: ConformerConfig, with_cmvn: bool) -> None:
        super().__init__()
        self.cfg = cfg
        self.global_cmvn = GlobalCMVN(cfg.input_dim) if with_cmvn else None
        self.embed = Conv2dSubsampling4(cfg.input_dim, cfg.output_size)
        self.encoders = nn.ModuleList(ConformerEncoderLayer(cfg) for _ in range(cfg.num_blocks))
        self.after_norm = nn.LayerNorm(cfg.output_size, eps=cfg.norm_eps)

    def normalize(self, feats: torch.Tensor) -> torch.Tensor:
        return self.global_cmvn(feats) if self.global_cmvn is not None else feats


class CTCHead(nn.Module):
    def __init__(self, dim: int, vocab_size: int) -> None:
        super().__init__()
        self.ctc_lo = nn.Linear(dim, vocab_size)


class ConformerCTC(nn.Module):
    def __init__(self, cfg: ConformerConfig, with_cmvn: bool) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = ConformerEncoder(cfg, with_cmvn)
        self.ctc = CTCHead(cfg.output_size, cfg.vocab_size)

    def _encoder_out(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder.after_norm(x) if self.cfg.normalize_before else x

    def _ctc(self, enc: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.ctc.ctc_lo(enc).float(), dim=-1)

    @torch.inference_mode()
    def encode_full(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, chunk_size: int, num_left_chunks: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, F) raw fbank -> encoder output (B, T', D) under the chunk mask, lengths (B,)."""
        enc = self.encoder
        x = enc.embed(enc.normalize(feats))  # (B, T', D)
        _b, t, d = x.shape
        lens = torch.tensor([subsampled_length(int(n)) for n in feat_lens], device=x.device)
        valid = torch.arange(t, device=x.device).unsqueeze(0) < lens.unsqueeze(1)  # (B, T')
        mask = chunk_attention_mask(t, chunk_size, num_left_chunks, x.device).unsqueeze(0) & valid.unsqueeze(
            1
        )
        pos_emb = sinusoid(torch.arange(t, device=x.device), d).unsqueeze(0).to(x.dtype)  # (1, T', D)
        for layer in enc.encoders:
            attn = cast(RelPositionAttention, layer.self_attn)

            def attend(h: torch.Tensor, attn: RelPositionAttention = attn) -> torch.Tensor:
                return attn.forward_full(h, mask, pos_emb)

            x, _ = layer(x, attend, valid, None)
        return self._encoder_out(x), lens

    @torch.inference_mode()
    def forward_full(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, chunk_size: int, num_left_chunks: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, F) raw fbank -> CTC log-probs (B, T', V) and lengths (B,)."""
        enc, lens = self.encode_full(feats, feat_lens, chunk_size, num_left_chunks)
        return self._ctc(enc), lens

    @torch.inference_mode()
    def forward_chunk_paged(
        self, feats: torch.Tensor, batch: PagedBatch, k_pool: torch.Tensor, v_pool: torch.Tensor,
        cnn_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """feats (B, W, F) normalized feature windows (zero padded) -> log-probs (B, C, V), the
        new CNN caches (L, B, D, lorder) and the encoder output (B, C, D). k_pool/v_pool: (L, S, H, d_k), written in place;
        cnn_cache: (L, B, D, lorder)."""
        enc = self.encoder
        x = enc.embed(feats)  # (B, C, D)
        new_cnn = []
        lorder = self.cfg.conv_lorder
        # Row b's new cache: the last `lorder` inputs before its own chunk end.
        take = (batch.chunk_lens.unsqueeze(1) + torch.arange(lorder, device=x.device)).unsqueeze(1)
        for i, layer in enumerate(enc.encoders):
            attn = cast(RelPositionAttention, layer.self_attn)

            def attend(h: torch.Tensor, attn: RelPositionAttention = attn, i: int = i) -> torch.Tensor:
                return attn.forward_paged(h, batch, k_pool[i], v_pool[i])

            x, x_cat = layer(x, attend, batch.chunk_valid, cnn_cache[i] if lorder else None)
            if x_cat is not None:
                new_cnn.append(x_cat.gather(2, take.expand(-1, x_cat.shape[1], -1)))
        caches = torch.stack(new_cnn) if new_cnn else cnn_cache
        out = self._encoder_out(x)
        return self._ctc(out), caches, out


def _activation(name: str) -> nn.Module:
    acts: dict[str, type[nn.Module]] = {"swish": nn.SiLU, "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}
    if name not in acts:
        raise ValueError(f"unsupported activation_type {name!r} (known: {', '.join(acts)})")
    return acts[name]()
