"""Whisper encoder–decoder in PyTorch with explicit, caller-owned KV caches.

Parameter names follow openai/whisper's `model.py` so that every checkpoint format maps
onto one layout (see `loader.py`). Unlike the reference, caches are passed explicitly
(`DecoderCache`, cache.py) instead of being captured by forward hooks: the runner owns them, grows
them, and reorders or compacts their rows when beams move or requests leave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.models.whisper.cache import CrossRun, DecoderCache
from engine.models.whisper.cross_attention import attend_run, cross_runs
from engine.models.whisper.cross_kv import as_stored, project_own, project_stored, stored_values
from engine.models.whisper.int8 import Int8Linear, fuse_int8_layers


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


@dataclass(frozen=True)
class AttentionContext:
    """Keys and values (H, S, Dh) an encoder block's positions attend to after their own, with an
    additive score bias (S,) when one key stands for several positions (log of their count)."""

    k: Tensor
    v: Tensor
    bias: Tensor | None = None


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> Tensor:
    """Whisper's fixed encoder position table (used when a checkpoint does not store it). Always
    computed on the CPU (`.to()` moves it), also inside a meta-device build (build.py), where
    torch's meta kernels for these ops would import torch._dynamo: seconds at start-up."""
    cpu = torch.device("cpu")
    log_timescale_increment = torch.log(torch.tensor(max_timescale, device=cpu)) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2, device=cpu))
    scaled_time = torch.arange(length, device=cpu)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)
        self.attention_dtype: torch.dtype | None = None
        """The float type `attend` computes its softmax attention in, where not the states' own
        (build.py `encoder_attention_dtype`: bfloat16 for the encoder under 'auto' on an AMX CPU)."""

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        return x.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)  # (B, H, T, Dh)

    def merge_heads(self, x: Tensor) -> Tensor:
        b, h, t, d = x.shape
        return x.transpose(1, 2).reshape(b, t, h * d)  # (B, T, C)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        fused: Int8Linear | None = self.__dict__.get("fused_kv")
        if fused is not None:
            k, v = fused(x).split(self.key.out_features, dim=-1)
            return self.split_heads(k), self.split_heads(v)
        return self.split_heads(self.key(x)), self.split_heads(self.value(x))

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values of the same states x, each (B, H, T, Dh)."""
        fused: Int8Linear | None = self.__dict__.get("fused_qkv")
        if fused is not None:
            q, k, v = fused(x).split(self.query.out_features, dim=-1)
            return self.split_heads(q), self.split_heads(k), self.split_heads(v)
        return (self.split_heads(self.query(x)), *self.project_kv(x))

    def fuse_int8_projections(self, with_query: bool = True) -> None:
        """Where key and value (and query, `with_query`: self-attention, whose queries read the
        same states) are int8, compute them as one int8 layer: bitwise the same outputs
        (int8.fuse_int8_layers), a third of the activation quantizations and GEMM calls. Kept
        outside the module tree (plain attributes): derived from the layers' own buffers, never
        saved in a state dict, and not more layers to quantize."""
        if isinstance(self.key, Int8Linear) and isinstance(self.value, Int8Linear):
            self.__dict__["fused_kv"] = fuse_int8_layers([self.key, self.value])
            if with_query and isinstance(self.query, Int8Linear):
                self.__dict__["fused_qkv"] = fuse_int8_layers([self.query, self.key, self.value])

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        kind = self.attention_dtype
        if kind is None or kind == q.dtype:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            out = F.scaled_dot_product_attention(q.to(kind), k.to(kind), v.to(kind),
                                                 attn_mask=None if mask is None else mask.to(kind)).to(q.dtype)
        return self.out(self.merge_heads(out))


class EncoderBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = nn.LayerNorm(n_state)
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)

    def forward(self, x: Tensor, context: AttentionContext | None = None) -> Tensor:
        """x (B, T, C). `context`: S more keys and values after x's own, shared by the batch, that
        every position also attends to (the encoded silence completing a short window to 30 s:
        see context.py)."""
        h = self.attn_ln(x)
        q, k, v = self.attn.project_qkv(h)
        mask = None
        if context is not None:
            b, t = x.shape[:2]
            k = torch.cat([k, context.k.expand(b, -1, -1, -1)], dim=2)  # (B, H, T + S, Dh)
            v = torch.cat([v, context.v.expand(b, -1, -1, -1)], dim=2)
            if context.bias is not None:
                mask = torch.cat([context.bias.new_zeros(t), context.bias]).to(x.dtype).view(1, 1, 1, -1)
        x = x + self.attn.attend(q, k, v, mask)
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

    def forward(self, mel: Tensor, context: Sequence[AttentionContext] | None = None) -> Tensor:
        """mel (B, n_mels, 2 × T) -> (B, T, C), T <= n_audio_ctx. With `context` (per block, the
        keys and values of positions that follow the window's own), every position attends to
        those as well."""
        x = self._embed(mel)
        for i, block in enumerate(self.blocks):
            x = block(x, None if context is None else context[i])
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


class TextDecoder(nn.Module):
    def __init__(self, dims: WhisperDims):
        super().__init__()
        self.n_head = dims.n_text_head
        # Storage given rather than initialised by nn.Embedding: in a meta-device build (build.py)
        # normal_'s meta kernel would import torch._dynamo (seconds); the checkpoint fills it there.
        # Anywhere else (tests, tools) it gets nn.Embedding's own N(0, 1) init, drawn at the same point.
        weight = torch.empty(dims.n_vocab, dims.n_text_state)
        if weight.device.type != "meta":
            nn.init.normal_(weight)
        self.token_embedding = nn.Embedding(dims.n_vocab, dims.n_text_state, _weight=weight)
        self.positional_embedding = nn.Parameter(torch.empty(dims.n_text_ctx, dims.n_text_state))
        self.blocks = nn.ModuleList(
            [DecoderBlock(dims.n_text_state, dims.n_text_head) for _ in range(dims.n_text_layer)]
        )
        self.ln = nn.LayerNorm(dims.n_text_state)
        self.cross_kv_dtype: torch.dtype | None = None
        """The dtype items' cross K/V are stored in (None: the model's; torch.int8: packed int8 rows
        with a scale each, engine/ops/int8_kv.py). int8 on the CPU int8 path (build.py): a decoder
        step reads every window's K/V and is bound by memory bandwidth, and the kernel
        (engine/ops/half_kv_attention.py) reads int8 rows in 68 bytes against float16's 128."""
        self.output_projection: nn.Module | None = None
        # a buffer, so that `.to()` moves and casts it with the embedding; not in the state dict
        self.output_weight_kn: Tensor | None
        self.register_buffer("output_weight_kn", None, persistent=False)  # see `keep_output_weight_transposed`

    def new_cache(
        self,
        audio_features: Tensor,
        capacity: int,
        audio_positions: list[int] | None = None,
        silence: tuple[list[Tensor], list[Tensor]] | None = None,
        shared_silence: bool = True,
        repeats: list[int] | None = None,
        cross: tuple[list[Tensor], list[Tensor]] | None = None,
        projected: Sequence[tuple[list[Tensor], list[Tensor]] | None] | None = None,
    ) -> DecoderCache:
        """Cross K/V for each item's audio (G, S, C) and empty self-attention storage for its
        `repeats[i]` rows (its beams, which share its cross K/V; default one row per item).

        With `audio_positions` and the `silence` K/V (see `silence_kv`), item i's own audio is its
        first audio_positions[i] positions and the rest of its features is that silence: only
        the own positions are held per item, and every item attends to the one copy of the
        silence's K/V after them. `shared_silence` (live passes) attends over all items' rows in
        one batched softmax; without it (offline) each item attends in calls with items of its
        own length only, so that its numbers do not depend on its batch mates. `cross`: the
        items' cross K/V per layer (G, H, own positions, Dh), already projected from these
        features (a window's prefill keeps them for its alignment pass). `projected`: per item,
        its cross K/V from `project_cross` (computed beside the decoder), or None to project here."""
        g = audio_features.shape[0]
        rows = g if repeats is None else sum(repeats)
        head_dim = audio_features.shape[2] // self.n_head
        short = audio_positions is not None and silence is not None and min(audio_positions) < audio_features.shape[1]
        if short:
            assert audio_positions is not None
            audio_features = audio_features[:, : max(audio_positions)]
        self_k, self_v, cross_k, cross_v = [], [], [], []
        for layer, block in enumerate(self.blocks):
            if cross is None:
                k, v = project_own(block.cross_attn, audio_features, audio_positions if short else None,
                                    [None if p is None else (p[0][layer], p[1][layer]) for p in projected or [None] * g],
                                    self.cross_kv_dtype)
            else:
                k, v = cross[0][layer], cross[1][layer]
            cross_k.append(as_stored(k, self.cross_kv_dtype))
            cross_v.append(as_stored(v, self.cross_kv_dtype))
            self_k.append(audio_features.new_zeros(rows, self.n_head, capacity, head_dim))
            self_v.append(audio_features.new_zeros(rows, self.n_head, capacity, head_dim))
        item_rows = list(repeats or [])
        if not short:
            return DecoderCache(self_k, self_v, cross_k, cross_v, item_rows=item_rows)
        assert silence is not None and audio_positions is not None
        n_audio = silence[0][0].shape[1]
        return DecoderCache(self_k, self_v, cross_k, cross_v, held=list(audio_positions),
                            shares_silence=[p < n_audio for p in audio_positions], batched=[shared_silence] * g,
                            silence_k=silence[0], silence_v=silence[1], item_rows=item_rows)

    @property
    def projects_cross_exactly(self) -> bool:
        """Whether an item's cross K/V come out bitwise the same projected alone or among others
        (int8 layers: per-row quantization and exact integer sums; a float GEMM rounds by its
        blocking, which depends on the row count), so `project_cross` may run apart from the prefill."""
        return all(isinstance(b.cross_attn.key, Int8Linear) and isinstance(b.cross_attn.value, Int8Linear)
                   for b in self.blocks)

    def project_cross(self, audio_features: Tensor, positions: int) -> tuple[list[Tensor], list[Tensor]]:
        """One window's cross K/V per layer (1, H, positions, Dh), stored as `new_cache` stores
        them, from the first `positions` of its features (S, C): what its prefill would project,
        computed where the encoder runs (encoder_thread.py) instead of on the engine thread."""
        features = audio_features[None, :positions]
        ks, vs = [], []
        for block in self.blocks:
            k, v = project_stored(block.cross_attn, features, self.cross_kv_dtype)
            ks.append(k)
            vs.append(v)
        return ks, vs

    def silence_kv(self, silence_features: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """Per layer cross K/V (H, n_audio_ctx, Dh) of the encoded silence (n_audio_ctx, C), stored
        as the items' own (read beside them, in the same kernel)."""
        ks, vs = self.project_cross(silence_features, silence_features.shape[0])
        return [k[0] for k in ks], [v[0] for v in vs]

    def _cross_attention(self, block: DecoderBlock, layer: int, h: Tensor, cache: DecoderCache,
                         runs: list[tuple[CrossRun, Tensor | None]]) -> Tensor:
        """Cross-attention of the rows' normed states h (N, T, C), one call per run of items
        (`DecoderCache.item_runs`, with the shared-silence mask of each live run). The rows of one
        item (its beams) attend as more query positions of one sequence (cross-attention has no
        mask), so each item's K/V are read once per step rather than once per beam; items with
        one row attend exactly as a batch of single rows."""
        attn = block.cross_attn
        q_all = attn.query(h)
        _, t, c = q_all.shape
        parts = []
        for run, silence_bias in runs:
            items, rows = run.items, run.rows
            q = attn.split_heads(q_all[rows].reshape(items.stop - items.start, run.per * t, c))
            out = attend_run(q, layer, cache, run, silence_bias)
            parts.append(attn.merge_heads(out).reshape(rows.stop - rows.start, t, c))
        return attn.out(parts[0] if len(parts) == 1 else torch.cat(parts))

    def forward(self, tokens: Tensor, positions: Tensor, cache: DecoderCache,
                logit_index: Tensor | tuple[Tensor, Tensor] | None = None) -> Tensor:
        """tokens, positions (N, T) -> logits (N, T, V); writes K/V of the new tokens into the cache
        at their positions. Each query attends to cached keys at positions <= its own.
        With `logit_index` (N, K), only the logits of those of each row's T inputs: (N, K, V) (a
        prefill needs two of its ~100, and the vocabulary projection is most of a step's cost);
        with (rows, inputs) (M,) each, the logits of those M (row, input) pairs: (M, V)."""
        n, t = tokens.shape
        cache.ensure_capacity(int(positions.max()) + 1)
        x = self.token_embedding(tokens) + self.positional_embedding[positions]  # (N, T, C)
        x = x.to(cache.self_k[0].dtype)
        key_pos = torch.arange(cache.capacity, device=tokens.device)
        mask = (key_pos[None, None, :] <= positions[:, :, None]).unsqueeze(1)  # (N, 1, T, T_cap)
        rows = torch.arange(n, device=tokens.device)[:, None].expand(n, t)
        runs = cross_runs(cache, t)
        for layer, block in enumerate(self.blocks):
            h = block.attn_ln(x)
            q, k_new, v_new = block.attn.project_qkv(h)  # (N, H, T, Dh)
            # scatter new K/V into each row's own positions
            cache.self_k[layer][rows, :, positions] = k_new.transpose(1, 2)
            cache.self_v[layer][rows, :, positions] = v_new.transpose(1, 2)
            x = x + block.attn.attend(q, cache.self_k[layer], cache.self_v[layer], mask)
            x = x + self._cross_attention(block, layer, block.cross_attn_ln(x), cache, runs)
            x = x + block.mlp(block.mlp_ln(x))
        if isinstance(logit_index, tuple):
            x = x[logit_index]
        elif logit_index is not None:
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
        cross: tuple[list[Tensor], list[Tensor]] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Full (uncached) pass over one sequence (1, T) for word alignment. Returns the cross-
        attention of the given (layer, head) pairs over the first `n_audio` encoder positions
        (the real audio, softmaxed there): (len(heads), T, n_audio), and the logits (T, V) (None
        without `with_logits`). `audio_positions`, `silence` and `cross` (the window's cross K/V
        from its prefill) as in `new_cache`."""
        t = tokens.shape[1]
        x = self.token_embedding(tokens) + self.positional_embedding[:t]
        x = x.to(audio_features.dtype)
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        positions = None if audio_positions is None else [audio_positions]
        audio = self.new_cache(audio_features, capacity=1, audio_positions=positions, silence=silence, cross=cross)
        (run, silence_bias), = cross_runs(audio, t)
        weights: dict[tuple[int, int], Tensor] = {}
        # without logits, nothing after the last alignment head's attention weights is needed
        last = len(self.blocks) - 1 if with_logits else max((layer for layer, _ in heads), default=len(self.blocks) - 1)
        for layer, block in enumerate(self.blocks):
            h = block.attn_ln(x)
            q, k, v = block.attn.project_qkv(h)
            x = x + block.attn.attend(q, k, v, causal)
            h = block.cross_attn_ln(x)
            q = block.cross_attn.split_heads(block.cross_attn.query(h))
            if any(lh[0] == layer for lh in heads):
                scale = q.shape[-1] ** -0.5
                k = stored_values(audio.cross_k[layer][:, :, :n_audio]).to(q.dtype)
                qk = (q @ k.transpose(-1, -2)).float() * scale  # (1, H, T, n_audio)
                w = torch.softmax(qk, dim=-1)
                for lh in heads:
                    if lh[0] == layer:
                        weights[lh] = w[0, lh[1]]
            if layer == last and not with_logits:
                break
            x = x + block.cross_attn.out(block.cross_attn.merge_heads(attend_run(q, layer, audio, run, silence_bias)))
            x = x + block.mlp(block.mlp_ln(x))
        logits = self.logits(self.ln(x))[0] if with_logits else None
        return torch.stack([weights[h] for h in heads]), logits

    def logits(self, x: Tensor) -> Tensor:
        """Hidden states -> vocabulary logits (float32), through the tied embedding (or its int8
        copy: on a CPU this 51864-row matmul is memory-bound, a quarter of the bytes)."""
        if self.output_projection is not None:
            return self.output_projection(x.float()).float()
        if self.output_weight_kn is not None:
            return (x @ self.output_weight_kn.to(x.dtype)).float()
        return (x @ self.token_embedding.weight.to(x.dtype).T).float()

    def keep_output_weight_transposed(self, stored: Tensor | None = None) -> None:
        """Keep a (C, V) row-major copy of the tied embedding for the logits (CPU, float). MKL's
        GEMM reads the (V, C) embedding transposed much slower on some CPUs: on an AMD EPYC
        (Zen 3) a 16-row logits product took 22 ms against 29 ms, a single row 4 ms against 10.
        Costs one more copy of the embedding (tiny: 80 MB); the dev set's transcripts are the same.
        `stored`: that copy as the converted-weights cache holds it (weights_cache.py), used when
        it matches the embedding's shape, dtype and device."""
        weight = self.token_embedding.weight.detach()
        if (stored is not None and stored.shape == weight.t().shape and stored.dtype == weight.dtype
                and stored.device == weight.device and stored.is_contiguous()):
            self.output_weight_kn = stored
        else:
            self.output_weight_kn = weight.t().contiguous()

    def quantize_output_projection(self) -> None:
        """Use an int8 copy of the tied embedding for the logits (CPU): this 51864-row matmul is
        most of a decoder step, and int8 reads a quarter of the bytes."""
        self.output_projection = Int8Linear(self.token_embedding.weight, None)


class Whisper(nn.Module):
    def __init__(self, dims: WhisperDims):
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(dims)
        self.decoder = TextDecoder(dims)
