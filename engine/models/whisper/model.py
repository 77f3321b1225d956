"""Whisper encoder–decoder in PyTorch with explicit, caller-owned KV caches.

Parameter names follow openai/whisper's `model.py` so that every checkpoint format maps
onto one layout (see `loader.py`). Unlike the reference, caches are passed explicitly
(`DecoderCache`) instead of being captured by forward hooks: the runner owns them, grows
them, and reorders or compacts their rows when beams move or requests leave.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class WhisperDims:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> Tensor:
    """Whisper's fixed encoder position table (used when a checkpoint does not store it)."""
    log_timescale_increment = torch.log(torch.tensor(max_timescale)) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        return x.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)  # (B, H, T, Dh)

    def merge_heads(self, x: Tensor) -> Tensor:
        b, h, t, d = x.shape
        return x.transpose(1, 2).reshape(b, t, h * d)  # (B, T, C)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.split_heads(self.key(x)), self.split_heads(self.value(x))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(self.merge_heads(out))


class EncoderBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = nn.LayerNorm(n_state)
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)

    def forward(self, x: Tensor) -> Tensor:
        h = self.attn_ln(x)
        k, v = self.attn.project_kv(h)
        x = x + self.attn.attend(self.attn.split_heads(self.attn.query(h)), k, v)
        return x + self.mlp(self.mlp_ln(x))


class DecoderBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = nn.LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head)
        self.cross_attn_ln = nn.LayerNorm(n_state)
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)


class AudioEncoder(nn.Module):
    def __init__(self, dims: WhisperDims):
        super().__init__()
        self.conv1 = nn.Conv1d(dims.n_mels, dims.n_audio_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dims.n_audio_state, dims.n_audio_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
        self.blocks = nn.ModuleList(
            [EncoderBlock(dims.n_audio_state, dims.n_audio_head) for _ in range(dims.n_audio_layer)]
        )
        self.ln_post = nn.LayerNorm(dims.n_audio_state)

    def forward(self, mel: Tensor) -> Tensor:
        """mel (B, n_mels, 2 × n_audio_ctx) -> (B, n_audio_ctx, C)."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x))
        x = x.transpose(1, 2)  # (B, T, C)
        x = x + self.positional_embedding[: x.shape[1]].to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


@dataclass
class DecoderCache:
    """K/V of every decoder row: self-attention grows by one position per step, cross-attention
    is computed once per audio window. Rows are (request × beam); row r is at `lengths[r]`."""

    self_k: list[Tensor]  # per layer (N, H, T_cap, Dh)
    self_v: list[Tensor]
    cross_k: list[Tensor]  # per layer (N, H, S, Dh)
    cross_v: list[Tensor]

    @property
    def num_rows(self) -> int:
        return self.self_k[0].shape[0] if self.self_k else 0

    @property
    def capacity(self) -> int:
        return self.self_k[0].shape[2] if self.self_k else 0

    def ensure_capacity(self, needed: int) -> None:
        """Grow self-attention storage geometrically so growth is amortized."""
        if needed > self.capacity:
            self.resize(max(needed, 2 * self.capacity, 16))

    def resize(self, new_cap: int) -> None:
        cap = self.capacity
        if new_cap == cap:
            return
        if new_cap < cap:
            for store in (self.self_k, self.self_v):
                for i, t in enumerate(store):
                    store[i] = t[:, :, :new_cap].contiguous()
            return
        for store in (self.self_k, self.self_v):
            for i, t in enumerate(store):
                grown = t.new_zeros(t.shape[0], t.shape[1], new_cap, t.shape[3])
                grown[:, :, :cap] = t
                store[i] = grown

    def select_rows(self, index: Tensor, self_only: bool = False) -> None:
        """Keep/reorder rows: row i becomes old row index[i]."""
        stores = (self.self_k, self.self_v) if self_only else (self.self_k, self.self_v, self.cross_k, self.cross_v)
        for store in stores:
            for i, t in enumerate(store):
                store[i] = t.index_select(0, index)

    def extend(self, other: DecoderCache) -> None:
        """Append `other`'s rows (capacities are aligned first)."""
        cap = max(self.capacity, other.capacity)
        self.resize(cap)
        other.resize(cap)
        for mine, theirs in (
            (self.self_k, other.self_k),
            (self.self_v, other.self_v),
            (self.cross_k, other.cross_k),
            (self.cross_v, other.cross_v),
        ):
            for i in range(len(mine)):
                mine[i] = torch.cat([mine[i], theirs[i]], dim=0)


class TextDecoder(nn.Module):
    def __init__(self, dims: WhisperDims):
        super().__init__()
        self.n_head = dims.n_text_head
        self.token_embedding = nn.Embedding(dims.n_vocab, dims.n_text_state)
        self.positional_embedding = nn.Parameter(torch.empty(dims.n_text_ctx, dims.n_text_state))
        self.blocks = nn.ModuleList(
            [DecoderBlock(dims.n_text_state, dims.n_text_head) for _ in range(dims.n_text_layer)]
        )
        self.ln = nn.LayerNorm(dims.n_text_state)

    def new_cache(self, audio_features: Tensor, capacity: int) -> DecoderCache:
        """Cross K/V for each row's audio (N, S, C) and empty self-attention storage."""
        n = audio_features.shape[0]
        head_dim = audio_features.shape[2] // self.n_head
        self_k, self_v, cross_k, cross_v = [], [], [], []
        for block in self.blocks:
            k, v = block.cross_attn.project_kv(audio_features)
            cross_k.append(k)
            cross_v.append(v)
            self_k.append(audio_features.new_zeros(n, self.n_head, capacity, head_dim))
            self_v.append(audio_features.new_zeros(n, self.n_head, capacity, head_dim))
        return DecoderCache(self_k, self_v, cross_k, cross_v)

    def forward(self, tokens: Tensor, positions: Tensor, cache: DecoderCache) -> Tensor:
        """tokens, positions (N, T) -> logits (N, T, V); writes K/V of the new tokens into the cache
        at their positions. Each query attends to cached keys at positions <= its own."""
        n, t = tokens.shape
        cache.ensure_capacity(int(positions.max()) + 1)
        x = self.token_embedding(tokens) + self.positional_embedding[positions]  # (N, T, C)
        x = x.to(cache.cross_k[0].dtype)
        key_pos = torch.arange(cache.capacity, device=tokens.device)
        mask = (key_pos[None, None, :] <= positions[:, :, None]).unsqueeze(1)  # (N, 1, T, T_cap)
        rows = torch.arange(n, device=tokens.device)[:, None].expand(n, t)
        for layer, block in enumerate(self.blocks):
            h = block.attn_ln(x)
            q = block.attn.split_heads(block.attn.query(h))
            k_new, v_new = block.attn.project_kv(h)  # (N, H, T, Dh)
            # scatter new K/V into each row's own positions
            cache.self_k[layer][rows, :, positions] = k_new.transpose(1, 2)
            cache.self_v[layer][rows, :, positions] = v_new.transpose(1, 2)
            x = x + block.attn.attend(q, cache.self_k[layer], cache.self_v[layer], mask)
            h = block.cross_attn_ln(x)
            q = block.cross_attn.split_heads(block.cross_attn.query(h))
            x = x + block.cross_attn.attend(q, cache.cross_k[layer], cache.cross_v[layer])
            x = x + block.mlp(block.mlp_ln(x))
        x = self.ln(x)
        return (x @ self.token_embedding.weight.to(x.dtype).T).float()

    def alignment_pass(
        self, tokens: Tensor, audio_features: Tensor, heads: list[tuple[int, int]], n_audio: int
    ) -> tuple[Tensor, Tensor]:
        """Full (uncached) pass over one sequence (1, T) for word alignment. Returns the cross-
        attention of the given (layer, head) pairs over the first `n_audio` encoder positions
        (the real audio, softmaxed there): (len(heads), T, n_audio), and the logits (T, V)."""
        t = tokens.shape[1]
        x = self.token_embedding(tokens) + self.positional_embedding[:t]
        x = x.to(audio_features.dtype)
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        weights: dict[tuple[int, int], Tensor] = {}
        for layer, block in enumerate(self.blocks):
            h = block.attn_ln(x)
            q = block.attn.split_heads(block.attn.query(h))
            k, v = block.attn.project_kv(h)
            x = x + block.attn.attend(q, k, v, causal)
            h = block.cross_attn_ln(x)
            q = block.cross_attn.split_heads(block.cross_attn.query(h))
            k, v = block.cross_attn.project_kv(audio_features)
            if any(lh[0] == layer for lh in heads):
                scale = q.shape[-1] ** -0.5
                qk = (q @ k[:, :, :n_audio].transpose(-1, -2)).float() * scale  # (1, H, T, n_audio)
                w = torch.softmax(qk, dim=-1)
                for lh in heads:
                    if lh[0] == layer:
                        weights[lh] = w[0, lh[1]]
            x = x + block.cross_attn.attend(q, k, v)
            x = x + block.mlp(block.mlp_ln(x))
        x = self.ln(x)
        logits = (x @ self.token_embedding.weight.to(x.dtype).T).float()[0]
        return torch.stack([weights[h] for h in heads]), logits


class Whisper(nn.Module):
    def __init__(self, dims: WhisperDims):
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(dims)
        self.decoder = TextDecoder(dims)

    @property
    def is_multilingual(self) -> bool:
        return self.dims.n_vocab >= 51865

    @property
    def num_languages(self) -> int:
        return self.dims.n_vocab - 51765 - int(self.is_multilingual)
