"""The speech-LLM's networks: the audio encoder, the projector and the Qwen decoder.

The audio encoder is Whisper's (two convolutions, sinusoid-free learned positions, pre-LN
blocks) followed by Qwen2-Audio's 2x average pooling; the projector is one linear layer into
the decoder's width. The decoder is a Qwen2/Qwen3 causal LM (RMSNorm, rotary positions,
grouped-query attention, SwiGLU) whose K/V live in the engine's paged block pool: `prefill`
writes a prompt's K/V into its blocks, `decode` advances a batch of rows (requests x beams) by
one token each, reading every row's history through its block table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.log_mel import HOP_LENGTH, N_FRAMES, LogMelExtractor
from engine.ops.paged_attention import paged_attention

ENCODER_CONV_STRIDE = 2
"""Mel frames per encoder position (conv2)."""
POOL_STRIDE = 2
"""Encoder positions per audio token (the average pooling)."""


@dataclass(frozen=True)
class EncoderDims:
    n_mels: int
    d_model: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    """Encoder positions of a full window (1500 = 30 s)."""


@dataclass(frozen=True)
class DecoderDims:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rms_eps: float
    rope_theta: float
    qkv_bias: bool
    """Qwen2: q/k/v projections carry biases."""
    qk_norm: bool
    """Qwen3: per-head RMSNorm of q and k before the rotation."""
    tie_embeddings: bool


class EncoderLayer(nn.Module):
    """Pre-LN transformer block. Whisper's (Qwen2-Audio) has no k bias and scales q before the
    product; Qwen3-ASR's has a k bias and scales the product (the references' rounding orders)."""

    def __init__(self, d: int, heads: int, ffn: int, whisper: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.whisper = whisper
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d, bias=not whisper)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        hd = d // self.heads
        h = self.self_attn_layer_norm(x)
        q = self.q_proj(h) * hd**-0.5 if self.whisper else self.q_proj(h)
        q = q.view(b, t, self.heads, hd).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_proj(h).view(b, t, self.heads, hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.heads, hd).transpose(1, 2)
        scale = 1.0 if self.whisper else hd**-0.5
        a = F.scaled_dot_product_attention(q, k, v, scale=scale).transpose(1, 2).reshape(b, t, d)
        x = x + self.out_proj(a)
        out: Tensor = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        return out


class AudioEncoder(nn.Module):
    """Qwen2-Audio's (Whisper's) encoder: a clip of at most 30 s -> (tokens, d_model)."""

    def __init__(self, dims: EncoderDims) -> None:
        super().__init__()
        self.dims = dims
        self._mel: LogMelExtractor | None = None
        self.conv1 = nn.Conv1d(dims.n_mels, dims.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dims.d_model, dims.d_model, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Parameter(torch.zeros(dims.max_positions, dims.d_model), requires_grad=False)
        self.layers = nn.ModuleList(EncoderLayer(dims.d_model, dims.heads, dims.ffn) for _ in range(dims.layers))
        self.layer_norm = nn.LayerNorm(dims.d_model)

    def forward(self, mel: Tensor, positions: int) -> Tensor:
        """`mel` (n_mels, >= 2 * positions + 1 frames, or the whole window) -> (positions // 2, d).

        The reference encodes the whole 30 s window with keys past the audio masked out; an
        output position p < `positions` hears mel frames up to 2p + 2 only, so encoding the
        audio's positions alone gives the same outputs for a fraction of the work."""
        x = F.gelu(self.conv1(mel[None].to(self.conv1.weight.dtype)))
        x = F.gelu(self.conv2(x))[:, :, :positions].transpose(1, 2)  # (1, P, d)
        x = x + self.embed_positions[:positions]
        for layer in self.layers:
            x = layer(x)
        x = F.avg_pool1d(x.transpose(1, 2), POOL_STRIDE, POOL_STRIDE).transpose(1, 2)  # (1, P // 2, d)
        out: Tensor = self.layer_norm(x)[0]
        return out

    @staticmethod
    def tokens(samples: int) -> int:
        """Audio tokens a clip of `samples` becomes (the processor's formula)."""
        return audio_tokens(_whisper_frames(samples))

    def encode(self, audio: np.ndarray) -> Tensor:
        """Waveform (16 kHz) -> (tokens, d_model): the reference's 30 s log-mel window (the audio
        followed by zeros), of which the audio's positions are encoded."""
        if self._mel is None:
            self._mel = LogMelExtractor(self.dims.n_mels, self.conv1.weight.device)
        mel = self._mel([audio], audio_padding=True)[0]
        frames = _whisper_frames(audio.shape[0])
        positions = (frames - 1) // ENCODER_CONV_STRIDE + 1
        out: Tensor = self(mel[:, : ENCODER_CONV_STRIDE * positions + 1], positions)
        return out


def _whisper_frames(samples: int) -> int:
    """Mel frames of a clip the Whisper front end marks as audio (its attention mask)."""
    return min(math.ceil(samples / HOP_LENGTH), N_FRAMES)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


Linear = Callable[[nn.Linear, Tensor], Tensor]


def plain(layer: nn.Linear, x: Tensor) -> Tensor:
    out: Tensor = layer(x)
    return out


def few_rows(layer: nn.Linear, x: Tensor) -> Tensor:
    """`layer(x)` for a few rows (a decode step), as weight @ x^T: MKL's GEMM with the rows as
    the small N dimension streams the weight once, where `linear` (rows as the small M) measured
    2.4x slower at 8 rows and 1.8x at 32 for a 151,936 x 1,024 LM head on this CPU (1 row: even)."""
    flat = x.reshape(-1, x.shape[-1])
    out = (layer.weight @ flat.T).T
    if layer.bias is not None:
        out = out + layer.bias
    return out.reshape(*x.shape[:-1], out.shape[-1])


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding, halves layout: x (..., T, H, hd), cos/sin (..., T, 1, hd)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class DecoderLayer(nn.Module):
    def __init__(self, dims: DecoderDims) -> None:
        super().__init__()
        self.dims = dims
        hd = dims.head_dim
        self.q_proj = nn.Linear(dims.hidden, dims.heads * hd, bias=dims.qkv_bias)
        self.k_proj = nn.Linear(dims.hidden, dims.kv_heads * hd, bias=dims.qkv_bias)
        self.v_proj = nn.Linear(dims.hidden, dims.kv_heads * hd, bias=dims.qkv_bias)
        self.o_proj = nn.Linear(dims.heads * hd, dims.hidden, bias=False)
        self.q_norm = RMSNorm(hd, dims.rms_eps) if dims.qk_norm else None
        self.k_norm = RMSNorm(hd, dims.rms_eps) if dims.qk_norm else None
        self.input_layernorm = RMSNorm(dims.hidden, dims.rms_eps)
        self.post_attention_layernorm = RMSNorm(dims.hidden, dims.rms_eps)
        self.gate_proj = nn.Linear(dims.hidden, dims.intermediate, bias=False)
        self.up_proj = nn.Linear(dims.hidden, dims.intermediate, bias=False)
        self.down_proj = nn.Linear(dims.intermediate, dims.hidden, bias=False)

    def qkv(self, x: Tensor, cos: Tensor, sin: Tensor, lin: Linear = plain) -> tuple[Tensor, Tensor, Tensor]:
        """x (N, T, hidden) -> q (N, T, H, hd), k and v (N, T, Hkv, hd), q and k rotated."""
        n, t, _ = x.shape
        d = self.dims
        h = self.input_layernorm(x)
        q = lin(self.q_proj, h).view(n, t, d.heads, d.head_dim)
        k = lin(self.k_proj, h).view(n, t, d.kv_heads, d.head_dim)
        v = lin(self.v_proj, h).view(n, t, d.kv_heads, d.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return rotate(q, cos, sin), rotate(k, cos, sin), v

    def finish(self, x: Tensor, attn: Tensor, lin: Linear = plain) -> Tensor:
        """Residual + output projection of the attention (N, T, H * hd), then the MLP."""
        x = x + lin(self.o_proj, attn)
        h = self.post_attention_layernorm(x)
        return x + lin(self.down_proj, F.silu(lin(self.gate_proj, h)) * lin(self.up_proj, h))


class QwenDecoder(nn.Module):
    inv_freq: Tensor

    def __init__(self, dims: DecoderDims) -> None:
        super().__init__()
        self.dims = dims
        self.embed_tokens = nn.Embedding(dims.vocab, dims.hidden)
        self.layers = nn.ModuleList(DecoderLayer(dims) for _ in range(dims.layers))
        self.norm = RMSNorm(dims.hidden, dims.rms_eps)
        self.lm_head = nn.Linear(dims.hidden, dims.vocab, bias=False)
        inv_freq = 1.0 / (dims.rope_theta ** (torch.arange(0, dims.head_dim, 2, dtype=torch.int64).float() / dims.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        return list(self.layers)  # type: ignore[arg-type]

    def rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """positions (N, T) -> cos, sin (N, T, 1, hd) in `dtype` (computed in float32, as the reference)."""
        freqs = positions.float()[..., None] * self.inv_freq.float()  # (N, T, hd / 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[:, :, None], emb.sin().to(dtype)[:, :, None]

    def logits(self, hidden: Tensor, lin: Linear = plain) -> Tensor:
        return lin(self.lm_head, self.norm(hidden)).float()

    def prefill(self, embeds: Tensor, k_pool: Tensor, v_pool: Tensor, slots: Tensor) -> Tensor:
        """One prompt's embeddings (T, hidden) at positions 0..T-1: causal attention over itself,
        K/V written to pool slots `slots` (T,). Returns the logits of its last position (vocab,)."""
        t = embeds.shape[0]
        x = embeds[None]
        cos, sin = self.rope(torch.arange(t, device=embeds.device)[None], x.dtype)
        for i, layer in enumerate(self.decoder_layers):
            q, k, v = layer.qkv(x, cos, sin)
            k_pool[i, slots] = k[0]
            v_pool[i, slots] = v[0]
            attn = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                enable_gqa=self.dims.kv_heads != self.dims.heads,
            )  # (1, H, T, hd)
            x = layer.finish(x, attn.transpose(1, 2).reshape(1, t, -1))
        return self.logits(x[0, -1])

    def decode(self, tokens: Tensor, positions: Tensor, k_pool: Tensor, v_pool: Tensor, slots: Tensor,
               block_table: Tensor, block_size: int) -> Tensor:
        """One token per row: tokens, positions, slots (R,) (the slot each row's new K/V goes to);
        block_table (R, M) covers positions 0..position of each row. Returns logits (R, vocab)."""
        r = tokens.shape[0]
        d = self.dims
        group = d.heads // d.kv_heads
        x = self.embed_tokens(tokens)[:, None]  # (R, 1, hidden)
        cos, sin = self.rope(positions[:, None], x.dtype)
        zeros = torch.zeros(r, device=tokens.device, dtype=torch.long)
        lengths = positions + 1
        empty = x.new_zeros(r, group, d.kv_heads, d.head_dim)
        for i, layer in enumerate(self.decoder_layers):
            q, k, v = layer.qkv(x, cos, sin, few_rows)
            k_pool[i, slots] = k[:, 0]
            v_pool[i, slots] = v[:, 0]
            # grouped-query heads as a "chunk" of `group` queries per KV head: query head
            # h = kv * group + g reads KV head kv; the new token's K/V are already in the pool,
            # so the chunk contributes no keys of its own (chunk_lens 0)
            grouped = q[:, 0].view(r, d.kv_heads, group, d.head_dim).transpose(1, 2)  # (R, G, Hkv, hd)
            out = paged_attention(grouped.contiguous(), empty, empty, k_pool[i], v_pool[i], block_table, zeros,
                                  lengths, zeros, None, d.head_dim**-0.5, block_size)  # (R, G, Hkv, hd)
            x = layer.finish(x, out.transpose(1, 2).reshape(r, 1, -1), few_rows)
        return self.logits(x[:, 0], few_rows)


class AudioTower(Protocol):
    def tokens(self, samples: int) -> int: ...

    def encode(self, audio: np.ndarray) -> Tensor: ...


class SpeechLLM(nn.Module):
    """Audio encoder + projector + decoder (the whole checkpoint)."""

    def __init__(self, audio_tower: nn.Module, projector: nn.Module, decoder: DecoderDims) -> None:
        super().__init__()
        self.audio_tower = audio_tower
        self.projector = projector
        self.decoder = QwenDecoder(decoder)

    @property
    def tower(self) -> AudioTower:
        return self.audio_tower  # type: ignore[return-value]

    def audio_tokens(self, samples: int) -> int:
        return self.tower.tokens(samples)

    def audio_embeddings(self, audio: np.ndarray) -> Tensor:
        """Waveform (16 kHz mono) -> its audio tokens' embeddings (tokens, hidden)."""
        out: Tensor = self.projector(self.tower.encode(audio))
        return out


class TwoLayerProjector(nn.Module):
    """Qwen3-ASR's projector: linear, GELU, linear."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(d_in, d_in)
        self.linear_2 = nn.Linear(d_in, d_out)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.linear_2(F.gelu(self.linear_1(x)))
        return out


def audio_tokens(mel_frames: int) -> int:
    """Audio tokens a clip of `mel_frames` frames becomes (the processors' formula)."""
    positions = (mel_frames - 1) // ENCODER_CONV_STRIDE + 1
    return (positions - 2) // POOL_STRIDE + 1
