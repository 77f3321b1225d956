"""Whisper encoder–decoder in PyTorch with explicit, caller-owned KV caches.

Parameter names follow openai/whisper's `model.py` so that every checkpoint format maps
onto one layout (see `loader.py`). Unlike the reference, caches are passed explicitly
(`DecoderCache`) instead of being captured by forward hooks: the runner owns them, grows
them, and reorders or compacts their rows when beams move or requests leave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.models.whisper.int8 import Int8Linear


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

    def forward(self, x: Tensor, context: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """x (B, T, C). `context`: K/V (H, S, Dh) of S more positions after x's own, shared by the
        batch, that every position also attends to (the encoded silence completing a short
        window to 30 s: see context.py)."""
        h = self.attn_ln(x)
        k, v = self.attn.project_kv(h)
        if context is not None:
            b = x.shape[0]
            k = torch.cat([k, context[0].expand(b, -1, -1, -1)], dim=2)  # (B, H, T + S, Dh)
            v = torch.cat([v, context[1].expand(b, -1, -1, -1)], dim=2)
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

    def forward(self, mel: Tensor, context: list[tuple[Tensor, Tensor]] | None = None) -> Tensor:
        """mel (B, n_mels, 2 × T) -> (B, T, C), T <= n_audio_ctx. With `context` (per block, K/V
        (H, n_audio_ctx, Dh) of another window at every position), positions T.. of that window
        are attended to as well, as if they followed this one's."""
        x = self._embed(mel)
        t = x.shape[1]
        for i, block in enumerate(self.blocks):
            x = block(x, None if context is None else (context[i][0][:, t:], context[i][1][:, t:]))
        return self.ln_post(x)

    def encode_keeping_kv(self, mel: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """One window mel (n_mels, 2 × T) -> its encoding (T, C), as `forward` computes it, and
        per block its self-attention K/V (H, T, Dh), in one pass."""
        x = self._embed(mel[None])
        kv = []
        for block in self.blocks:
            k, v = block.attn.project_kv(block.attn_ln(x))
            kv.append((k[0].contiguous(), v[0].contiguous()))
            x = block(x)
        return self.ln_post(x)[0], kv

    def _embed(self, mel: Tensor) -> Tensor:
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x))
        x = x.transpose(1, 2)  # (B, T, C)
        return x + self.positional_embedding[: x.shape[1]].to(x.dtype)


@dataclass
class DecoderCache:
    """K/V of every decoder row: self-attention grows by one position per step, cross-attention
    is computed once per audio window. Rows are (request × beam), their self-attention K/V one
    per row; cross-attention K/V are one per item (an audio window), shared by its
    `item_rows[i]` consecutive rows (its beams): a beam never moves to another item's audio, and
    reading an item's K/V once for all its beams is what makes a beam step cheap."""

    self_k: list[Tensor]  # per layer (N, H, T_cap, Dh)
    self_v: list[Tensor]
    cross_k: list[Tensor]  # per layer (G, H, S, Dh)
    cross_v: list[Tensor]
    cross_len: Tensor | None = None
    """(G,) audio positions of each item held in cross_k/v; the rest of an item's context, up to
    Whisper's 1500 positions, is the shared encoded silence below ('fit' windows, context.py).
    None: every item's context is all of cross_k/v."""
    silence_k: list[Tensor] | None = None  # per layer (H, n_audio_ctx, Dh), shared by all rows
    silence_v: list[Tensor] | None = None
    item_rows: list[int] = field(default_factory=list)
    """Rows of each item, in row order (sums to num_rows); empty: one row per item."""

    def __post_init__(self) -> None:
        if not self.item_rows:
            self.item_rows = [1] * self.num_items

    @property
    def num_rows(self) -> int:
        return self.self_k[0].shape[0] if self.self_k else 0

    @property
    def num_items(self) -> int:
        return self.cross_k[0].shape[0] if self.cross_k else 0

    @property
    def capacity(self) -> int:
        return self.self_k[0].shape[2] if self.self_k else 0

    def item_runs(self) -> list[tuple[slice, slice, int]]:
        """Maximal runs of consecutive items with the same number of rows: (items, their rows,
        rows per item). One cross-attention call serves a run."""
        runs: list[tuple[slice, slice, int]] = []
        item = row = 0
        while item < len(self.item_rows):
            per = self.item_rows[item]
            end = item
            while end < len(self.item_rows) and self.item_rows[end] == per:
                end += 1
            runs.append((slice(item, end), slice(row, row + per * (end - item)), per))
            row += per * (end - item)
            item = end
        return runs

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

    @property
    def cross_capacity(self) -> int:
        return self.cross_k[0].shape[2] if self.cross_k else 0

    def reorder_rows(self, index: Tensor) -> None:
        """Beams moved within their items: row i's self-attention K/V become old row index[i]'s."""
        for store in (self.self_k, self.self_v):
            for i, t in enumerate(store):
                store[i] = t.index_select(0, index)

    def select_items(self, items: list[int]) -> None:
        """Keep items `items` (in that order) with all their rows."""
        starts = [0]
        for n in self.item_rows:
            starts.append(starts[-1] + n)
        rows = [r for i in items for r in range(starts[i], starts[i + 1])]
        device = self.cross_k[0].device if self.cross_k else None
        item_index = torch.tensor(items, dtype=torch.long, device=device)
        row_index = torch.tensor(rows, dtype=torch.long, device=device)
        for store, index in ((self.self_k, row_index), (self.self_v, row_index), (self.cross_k, item_index),
                             (self.cross_v, item_index)):
            for i, t in enumerate(store):
                store[i] = t.index_select(0, index)
        self.item_rows = [self.item_rows[i] for i in items]
        if self.cross_len is not None:
            self.cross_len = self.cross_len.index_select(0, item_index)
            self.shrink_cross()

    def shrink_cross(self) -> None:
        """Drop cross positions no item holds (items with long contexts left the batch)."""
        if self.cross_len is None or not self.cross_k or self.cross_k[0].shape[0] == 0:
            return
        needed = int(self.cross_len.max())
        if needed < self.cross_capacity:
            for store in (self.cross_k, self.cross_v):
                for i, t in enumerate(store):
                    store[i] = t[:, :, :needed].contiguous()

    def pad_cross(self, length: int) -> None:
        """Grow cross storage to `length` positions, masked by `cross_len` (items without one get
        their full current length)."""
        cap = self.cross_capacity
        if self.cross_len is None:
            self.cross_len = torch.full((self.num_items,), cap, dtype=torch.long, device=self.cross_k[0].device)
        if length <= cap:
            return
        for store in (self.cross_k, self.cross_v):
            for i, t in enumerate(store):
                store[i] = F.pad(t, (0, 0, 0, length - cap))

    def extend(self, other: DecoderCache) -> None:
        """Append `other`'s items and rows (capacities are aligned first)."""
        cap = max(self.capacity, other.capacity)
        self.resize(cap)
        other.resize(cap)
        if self.cross_len is not None or other.cross_len is not None or self.cross_capacity != other.cross_capacity:
            cross = max(self.cross_capacity, other.cross_capacity)
            self.pad_cross(cross)
            other.pad_cross(cross)
            assert self.cross_len is not None and other.cross_len is not None
            self.cross_len = torch.cat([self.cross_len, other.cross_len])
            self.silence_k = self.silence_k or other.silence_k
            self.silence_v = self.silence_v or other.silence_v
        for mine, theirs in (
            (self.self_k, other.self_k),
            (self.self_v, other.self_v),
            (self.cross_k, other.cross_k),
            (self.cross_v, other.cross_v),
        ):
            for i in range(len(mine)):
                mine[i] = torch.cat([mine[i], theirs[i]], dim=0)
        self.item_rows = [*self.item_rows, *other.item_rows]


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
        self.output_projection: nn.Module | None = None

    def new_cache(
        self,
        audio_features: Tensor,
        capacity: int,
        audio_positions: list[int] | None = None,
        silence: tuple[list[Tensor], list[Tensor]] | None = None,
        shared_silence: bool = True,
        repeats: list[int] | None = None,
    ) -> DecoderCache:
        """Cross K/V for each item's audio (G, S, C) and empty self-attention storage for its
        `repeats[i]` rows (its beams, which share its cross K/V; default one row per item).

        With `audio_positions` and the `silence` K/V (see `silence_kv`), item i's own audio is its
        first audio_positions[i] positions and the rest of its features is that silence, whose
        K/V are copied rather than projected again. `shared_silence` keeps only the own positions
        per row and attends to the silence once for all rows (less memory read per step: live
        passes); without it every row holds all positions, so a row's attention has the same
        shapes whatever its batch mates (offline: transcripts do not depend on the batch)."""
        g = audio_features.shape[0]
        rows = g if repeats is None else sum(repeats)
        head_dim = audio_features.shape[2] // self.n_head
        short = audio_positions is not None and silence is not None and min(audio_positions) < audio_features.shape[1]
        if short:
            assert audio_positions is not None
            audio_features = audio_features[:, : max(audio_positions)]
        self_k, self_v, cross_k, cross_v = [], [], [], []
        for layer, block in enumerate(self.blocks):
            k, v = block.cross_attn.project_kv(audio_features)  # (G, H, S_own, Dh)
            if short and not shared_silence:
                assert silence is not None and audio_positions is not None
                k, v = _complete_with(k, silence[0][layer], audio_positions), _complete_with(v, silence[1][layer],
                                                                                            audio_positions)
            cross_k.append(k.contiguous())  # read every step: a strided layout costs 10x in matmuls
            cross_v.append(v.contiguous())
            self_k.append(audio_features.new_zeros(rows, self.n_head, capacity, head_dim))
            self_v.append(audio_features.new_zeros(rows, self.n_head, capacity, head_dim))
        item_rows = list(repeats or [])
        if not short or not shared_silence:
            return DecoderCache(self_k, self_v, cross_k, cross_v, item_rows=item_rows)
        assert silence is not None and audio_positions is not None
        cross_len = torch.tensor(audio_positions, dtype=torch.long, device=audio_features.device)
        return DecoderCache(self_k, self_v, cross_k, cross_v, cross_len, silence[0], silence[1], item_rows)

    def silence_kv(self, silence_features: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """Per layer cross K/V (H, n_audio_ctx, Dh) of the encoded silence (n_audio_ctx, C)."""
        ks, vs = [], []
        for block in self.blocks:
            k, v = block.cross_attn.project_kv(silence_features[None])
            ks.append(k[0].contiguous())
            vs.append(v[0].contiguous())
        return ks, vs

    def _cross_attention(self, block: DecoderBlock, layer: int, h: Tensor, cache: DecoderCache,
                         bias: Tensor | None) -> Tensor:
        """Cross-attention of the rows' normed states h (N, T, C). The rows of one item (its beams)
        attend as more query positions of one sequence (cross-attention has no mask), so each
        item's K/V are read once per step rather than once per beam; items with one row attend
        exactly as a batch of single rows."""
        attn = block.cross_attn
        q_all = attn.query(h)
        _, t, c = q_all.shape
        parts = []
        for items, rows, per in cache.item_runs():
            q = attn.split_heads(q_all[rows].reshape(items.stop - items.start, per * t, c))
            out = self._attend_items(q, layer, cache, bias, items)
            parts.append(attn.merge_heads(out).reshape(rows.stop - rows.start, t, c))
        return attn.out(parts[0] if len(parts) == 1 else torch.cat(parts))

    def _attend_items(self, q: Tensor, layer: int, cache: DecoderCache, bias: Tensor | None, items: slice) -> Tensor:
        """Attention (G, H, T, Dh) of queries q (G, H, T, Dh) over the cross K/V of `items`; items
        with a short context attend over their own positions followed by the shared silence, in
        one softmax. The silence K/V are read once for all items, which is what makes a batch of
        short live windows cheap (the step is memory-bound)."""
        k, v = cache.cross_k[layer][items], cache.cross_v[layer][items]
        if bias is None:
            return F.scaled_dot_product_attention(q, k, v)
        assert cache.silence_k is not None and cache.silence_v is not None
        n, h, t, d = q.shape
        q = q * d**-0.5
        sk, sv = cache.silence_k[layer], cache.silence_v[layer]
        s_sil = (q.permute(1, 0, 2, 3).reshape(h, n * t, d) @ sk.transpose(-1, -2)).view(h, n, t, -1)
        scores = torch.cat([q @ k.transpose(-1, -2), s_sil.permute(1, 0, 2, 3)], dim=-1).float() + bias[items]
        p = torch.softmax(scores, dim=-1).to(q.dtype)
        s = k.shape[2]
        out = p[..., :s] @ v
        p_sil = p[..., s:].permute(1, 0, 2, 3).reshape(h, n * t, -1)
        return out + (p_sil @ sv).view(h, n, t, d).permute(1, 0, 2, 3)

    @staticmethod
    def _cross_bias(cache: DecoderCache) -> Tensor | None:
        """(G, 1, 1, S + 1500) additive mask over [own positions, silence positions] per item."""
        if cache.cross_len is None or cache.silence_k is None:
            return None
        device = cache.cross_len.device
        lengths = cache.cross_len[:, None, None, None]
        real = torch.arange(cache.cross_capacity, device=device)[None, None, None, :] < lengths
        silence = torch.arange(cache.silence_k[0].shape[1], device=device)[None, None, None, :] >= lengths
        keep = torch.cat([real, silence], dim=-1)
        return torch.zeros(keep.shape, device=device).masked_fill_(~keep, float("-inf"))

    def forward(self, tokens: Tensor, positions: Tensor, cache: DecoderCache, logit_index: Tensor | None = None) -> Tensor:
        """tokens, positions (N, T) -> logits (N, T, V); writes K/V of the new tokens into the cache
        at their positions. Each query attends to cached keys at positions <= its own.
        With `logit_index` (N, K), only the logits of those of each row's T inputs: (N, K, V) (a
        prefill needs two of its ~100, and the vocabulary projection is most of a step's cost)."""
        n, t = tokens.shape
        cache.ensure_capacity(int(positions.max()) + 1)
        x = self.token_embedding(tokens) + self.positional_embedding[positions]  # (N, T, C)
        x = x.to(cache.cross_k[0].dtype)
        key_pos = torch.arange(cache.capacity, device=tokens.device)
        mask = (key_pos[None, None, :] <= positions[:, :, None]).unsqueeze(1)  # (N, 1, T, T_cap)
        rows = torch.arange(n, device=tokens.device)[:, None].expand(n, t)
        cross_bias = self._cross_bias(cache)
        for layer, block in enumerate(self.blocks):
            h = block.attn_ln(x)
            q = block.attn.split_heads(block.attn.query(h))
            k_new, v_new = block.attn.project_kv(h)  # (N, H, T, Dh)
            # scatter new K/V into each row's own positions
            cache.self_k[layer][rows, :, positions] = k_new.transpose(1, 2)
            cache.self_v[layer][rows, :, positions] = v_new.transpose(1, 2)
            x = x + block.attn.attend(q, cache.self_k[layer], cache.self_v[layer], mask)
            x = x + self._cross_attention(block, layer, block.cross_attn_ln(x), cache, cross_bias)
            x = x + block.mlp(block.mlp_ln(x))
        if logit_index is not None:
            x = x[torch.arange(n, device=x.device)[:, None], logit_index]
        x = self.ln(x)
        return self.logits(x)

    def alignment_pass(
        self,
        tokens: Tensor,
        audio_features: Tensor,
        heads: Sequence[tuple[int, int]],
        n_audio: int,
        audio_positions: int | None = None,
        silence: tuple[list[Tensor], list[Tensor]] | None = None,
        with_logits: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Full (uncached) pass over one sequence (1, T) for word alignment. Returns the cross-
        attention of the given (layer, head) pairs over the first `n_audio` encoder positions
        (the real audio, softmaxed there): (len(heads), T, n_audio), and the logits (T, V) (None
        without `with_logits`). `audio_positions` and `silence` as in `new_cache`."""
        t = tokens.shape[1]
        x = self.token_embedding(tokens) + self.positional_embedding[:t]
        x = x.to(audio_features.dtype)
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        positions = None if audio_positions is None else [audio_positions]
        audio = self.new_cache(audio_features, capacity=1, audio_positions=positions, silence=silence)
        bias = self._cross_bias(audio)
        weights: dict[tuple[int, int], Tensor] = {}
        for layer, block in enumerate(self.blocks):
            h = block.attn_ln(x)
            q = block.attn.split_heads(block.attn.query(h))
            k, v = block.attn.project_kv(h)
            x = x + block.attn.attend(q, k, v, causal)
            h = block.cross_attn_ln(x)
            q = block.cross_attn.split_heads(block.cross_attn.query(h))
            if any(lh[0] == layer for lh in heads):
                scale = q.shape[-1] ** -0.5
                k = audio.cross_k[layer][:, :, :n_audio]
                qk = (q @ k.transpose(-1, -2)).float() * scale  # (1, H, T, n_audio)
                w = torch.softmax(qk, dim=-1)
                for lh in heads:
                    if lh[0] == layer:
                        weights[lh] = w[0, lh[1]]
            x = x + block.cross_attn.out(block.cross_attn.merge_heads(self._attend_items(q, layer, audio, bias,
                                                                                        slice(0, 1))))
            x = x + block.mlp(block.mlp_ln(x))
        logits = self.logits(self.ln(x))[0] if with_logits else None
        return torch.stack([weights[h] for h in heads]), logits

    def logits(self, x: Tensor) -> Tensor:
        """Hidden states -> vocabulary logits (float32), through the tied embedding (or its int8
        copy: on a CPU this 51864-row matmul is memory-bound, a quarter of the bytes)."""
        if self.output_projection is not None:
            return self.output_projection(x.float()).float()
        return (x @ self.token_embedding.weight.to(x.dtype).T).float()

    def quantize_output_projection(self) -> None:
        """Use an int8 copy of the tied embedding for the logits (CPU): this 51864-row matmul is
        most of a decoder step, and int8 reads a quarter of the bytes."""
        self.output_projection = Int8Linear(self.token_embedding.weight, None)


def _complete_with(own: Tensor, silence: Tensor, lengths: list[int]) -> Tensor:
    """Per item i, own[i] (H, S_own, Dh) up to lengths[i] followed by silence (H, S_full, Dh)
    from there on: (G, H, S_full, Dh)."""
    out = silence.expand(own.shape[0], -1, -1, -1).clone()
    for i, n in enumerate(lengths):
        out[i, :, :n] = own[i, :, :n]
    return out


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
