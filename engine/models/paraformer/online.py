"""paraformer-online (FunASR's ParaformerStreaming): one chunk of many streams in one batch.

A stream's encoder input is cut into windows of `left + chunk + ahead` LFR frames (60 ms each):
each window starts with the last `left + ahead` frames of the one before (the first starts with
zeros) and adds `chunk` new frames, so the look-ahead frames of one window are encoded again as
the start of the next. Per chunk, as FunASR's `generate(cache=..., is_final=...)` runs it:

1. the new frames are scaled and get streaming positions (numbered on from the stream's earlier
   frames); the SAN-M layers attend over the window plus up to `encoder_look_back` chunks of
   earlier keys and values; their FSMN sees the window alone;
2. the CIF predictor weighs the window's frames; only the chunk's frames count (the left context
   and the look-ahead weigh zero) except in the final window, which counts all of them and then
   `tail_threshold` over a zero frame; integration carries across chunks the weight and the
   embedding fraction left after the last fire;
3. when a token fired, the decoder runs over the fired embeddings: its FSMN is causal and keeps
   the last `kernel - 1` inputs across chunks; its cross-attention reads the window plus up to
   `decoder_look_back` chunks of earlier encoder keys and values. A chunk that fires nothing does
   not run the decoder and leaves its caches as they were.

The last chunk of a stream is the audio left after its whole chunks; when that is less than one
LFR frame of audio, FunASR runs the final window on the previous window's kept frames alone (the
few samples left are not featurized), and so does this module.

The integration is FunASR's float32 loop (one frame at a time), vectorised over the streams of
the batch, so fires fall where FunASR's do. Padded rows are masked out of attention, FSMN and
CIF, so a stream's output does not depend on what it is batched with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from engine.models.paraformer.encoder import sinusoid
from engine.models.paraformer.model import Paraformer

KV = tuple[torch.Tensor, torch.Tensor]
"""Keys and values of one stream in one layer, each (H, frames, d_k)."""


@dataclass(frozen=True)
class ChunkGeometry:
    """FunASR's streaming `chunk_size` (in LFR frames) and look-backs (in chunks)."""

    left: int
    chunk: int
    ahead: int
    encoder_look_back: int
    decoder_look_back: int

    @property
    def kept(self) -> int:
        """Frames of a window carried into the next one."""
        return self.left + self.ahead


@dataclass(eq=False)
class OnlineState:
    """One stream's model state between chunks (FunASR's streaming `cache`)."""

    window: torch.Tensor
    """(left + ahead, input_size) embedded frames the next window starts with."""
    encoder_kv: list[KV | None]
    """Per encoder layer: keys and values of earlier chunks (None before the first)."""
    cif_alpha: torch.Tensor
    """() float32 weight integrated since the last fire."""
    cif_hidden: torch.Tensor
    """(D,) float32 that part's embedding divided by its weight (FunASR keeps it so)."""
    decoder_fsmn: list[torch.Tensor]
    """Per decoder block: its FSMN's last `kernel - 1` inputs, (kernel - 1, D)."""
    decoder_kv: list[KV | None]
    """Per decoder block: encoder keys and values of earlier chunks (None before the first)."""
    position: int = 0
    """LFR frames embedded so far: the next frame's position is this + 1."""


@dataclass
class ChunkInput:
    state: OnlineState
    feats: torch.Tensor
    """(n, input_size) the chunk's new normalised LFR frames (unused for a `tail` window)."""
    final: bool
    tail: bool = False
    """Final window made of the previous window's kept frames alone."""


@dataclass
class ChunkResult:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def new_state(model: Paraformer, geo: ChunkGeometry) -> OnlineState:
    cfg = model.cfg
    p = next(model.parameters())
    d, kernel = cfg.encoder.output_size, cfg.decoder.kernel_size
    blocks = len(model.decoder.decoders)
    return OnlineState(
        window=torch.zeros(geo.kept, cfg.encoder.input_size, dtype=p.dtype, device=p.device),
        encoder_kv=[None] * len(model.encoder.layers),
        cif_alpha=torch.zeros((), dtype=torch.float32, device=p.device),
        cif_hidden=torch.zeros(d, dtype=torch.float32, device=p.device),
        decoder_fsmn=[torch.zeros(kernel - 1, d, dtype=p.dtype, device=p.device) for _ in range(blocks)],
        decoder_kv=[None] * blocks,
    )  # fmt: skip


@torch.inference_mode()
def run_chunks(model: Paraformer, geo: ChunkGeometry, inputs: list[ChunkInput]) -> list[ChunkResult]:
    """Advance every stream by its chunk (states updated in place); the tokens each one fired
    (blank, sos and eos dropped) with their log-probabilities."""
    windows = [_window(model, geo, inp) for inp in inputs]
    lengths = torch.tensor([len(w) for w in windows], device=windows[0].device)
    x = torch.nn.utils.rnn.pad_sequence(windows, batch_first=True)  # (B, W, input_size)
    enc = _encode(model, geo, inputs, x, lengths)  # (B, W, D), zero past each window
    embeds, counts = _fire(model, geo, inputs, enc, lengths)
    results = [ChunkResult() for _ in inputs]
    rows = [i for i, n in enumerate(counts) if n > 0]
    if not rows:
        return results
    idx = torch.tensor(rows, device=enc.device)
    logp = _decode(model, geo, [inputs[i] for i in rows], embeds[idx].to(enc.dtype), [counts[i] for i in rows],
                   enc[idx], lengths[idx])  # fmt: skip
    scores, best = (t.cpu() for t in logp.float().max(dim=-1))
    dropped = {model.cfg.blank_id, model.cfg.sos, model.cfg.eos}
    for j, i in enumerate(rows):
        keep = [(int(t), float(s)) for t, s in zip(best[j, : counts[i]], scores[j, : counts[i]], strict=True)
                if int(t) not in dropped]  # fmt: skip
        results[i] = ChunkResult([t for t, _ in keep], [s for _, s in keep])
    return results


def _window(model: Paraformer, geo: ChunkGeometry, inp: ChunkInput) -> torch.Tensor:
    """The stream's encoder window: kept frames + the chunk's frames, scaled and positioned."""
    st = inp.state
    if inp.tail:
        return st.window
    n, depth = inp.feats.shape
    x = inp.feats.to(st.window.dtype) * math.sqrt(model.cfg.encoder.output_size)
    x = x + sinusoid(n, depth, x.dtype, x.device, start=st.position)
    st.position += n
    window = torch.cat([st.window, x])
    st.window = window[-geo.kept :]
    return window


def _past(caches: list[KV | None], like: torch.Tensor) -> tuple[KV | None, torch.Tensor]:
    """Padded (B, H, P, d_k) keys and values of each row's cache, and the (B, P) mask of real ones."""
    sizes = [0 if c is None else c[0].shape[1] for c in caches]
    b, h, _, d_k = like.shape
    p = max(sizes)
    valid = torch.arange(p, device=like.device)[None, :] < torch.tensor(sizes, device=like.device)[:, None]
    if p == 0:
        return None, valid
    k, v = like.new_zeros(b, h, p, d_k), like.new_zeros(b, h, p, d_k)
    for i, c in enumerate(caches):
        if c is not None:
            k[i, :, : sizes[i]], v[i, :, : sizes[i]] = c
    return (k, v), valid


def _encode(model: Paraformer, geo: ChunkGeometry, inputs: list[ChunkInput], x: torch.Tensor,
            lengths: torch.Tensor) -> torch.Tensor:  # fmt: skip
    encoder = model.encoder
    b, w, _ = x.shape
    valid = torch.arange(w, device=x.device)[None, :] < lengths[:, None]  # (B, W)
    mask = valid[:, :, None].to(x.dtype)
    d_k = encoder.cfg.output_size // encoder.cfg.attention_heads
    like = x.new_zeros(b, encoder.cfg.attention_heads, 0, d_k)
    for layer_no, layer in enumerate(encoder.layers):
        past, past_valid = _past([inp.state.encoder_kv[layer_no] for inp in inputs], like)
        key_mask = torch.cat([past_valid, valid], 1)[:, None, None, :]
        x, k, v = layer.forward_chunk(x, mask, past, key_mask)
        if geo.encoder_look_back > 0:
            limit = geo.encoder_look_back * geo.chunk
            for i, inp in enumerate(inputs):
                if inp.final:
                    continue  # the stream ends with this chunk
                keep = int(lengths[i]) - geo.ahead  # FunASR caches the window less its look-ahead
                new = (k[i, :, :keep], v[i, :, :keep])
                old = inp.state.encoder_kv[layer_no]
                inp.state.encoder_kv[layer_no] = new if old is None else (
                    torch.cat([old[0], new[0]], 1)[:, -limit:], torch.cat([old[1], new[1]], 1)[:, -limit:])
    out: torch.Tensor = encoder.after_norm(x) * mask
    return out


def _fire(model: Paraformer, geo: ChunkGeometry, inputs: list[ChunkInput], enc: torch.Tensor,
          lengths: torch.Tensor) -> tuple[torch.Tensor, list[int]]:  # fmt: skip
    """CIF over each window, carried on from the stream's last fire: (embeds (B, N, D) float32,
    tokens fired per row)."""
    pred = model.predictor
    cfg = pred.cfg
    b, w, d = enc.shape
    ctx = F.pad(enc.transpose(1, 2), (cfg.l_order, cfg.r_order))
    out = pred.cif_output(torch.relu(pred.cif_conv1d(ctx)).transpose(1, 2)).float()  # (B, W, 1)
    alphas = torch.relu(torch.sigmoid(out) * cfg.smooth_factor - cfg.noise_threshold).squeeze(-1)
    frame = torch.arange(w, device=enc.device)[None, :]
    final = torch.tensor([inp.final for inp in inputs], device=enc.device)[:, None]
    counted = (frame < lengths[:, None]) & (frame >= geo.left) & (final | (frame < geo.left + geo.chunk))
    alphas = alphas * counted
    tail = final.float() * cfg.tail_threshold  # (B, 1): only a final window gets the tail frame
    alphas = torch.cat([torch.stack([inp.state.cif_alpha for inp in inputs])[:, None], alphas, tail], 1)
    hidden = torch.cat([torch.stack([inp.state.cif_hidden for inp in inputs])[:, None], enc.float(),
                        enc.new_zeros(b, 1, d, dtype=torch.float32)], 1)  # fmt: skip
    thr = cfg.threshold
    integ = torch.zeros(b, device=enc.device)
    frames = torch.zeros(b, d, device=enc.device)
    fires, sums = [], []
    for t in range(alphas.shape[1]):  # FunASR's loop, one float32 operation at a time
        a, h = alphas[:, t], hidden[:, t]
        under = (a + integ) < thr
        acc = frames + torch.where(under, a, thr - integ)[:, None] * h
        integ = integ + a
        fire = ~under
        integ = torch.where(fire, integ - thr, integ)
        frames = torch.where(fire[:, None], integ[:, None] * h, acc)
        fires.append(fire)
        sums.append(acc)
    carried = torch.where(integ[:, None] > 0, frames / integ[:, None], frames)
    for i, inp in enumerate(inputs):
        inp.state.cif_alpha, inp.state.cif_hidden = integ[i], carried[i]
    fired = torch.stack(fires, 1)  # (B, T'): at most one fire per frame
    per_row = fired.sum(1)
    counts = per_row.tolist()
    embeds = enc.new_zeros(b, max(counts), d, dtype=torch.float32)
    slots = torch.arange(embeds.shape[1], device=enc.device)[None, :] < per_row[:, None]
    embeds[slots] = torch.stack(sums, 1)[fired]  # both row-major over (stream, order of firing)
    return embeds, counts


def _decode(model: Paraformer, geo: ChunkGeometry, inputs: list[ChunkInput], embeds: torch.Tensor,
            counts: list[int], enc: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The decoder over each row's fired embeddings -> (B, N, V) log-probabilities."""
    decoder = model.decoder
    x = embeds
    w = enc.shape[1]
    valid = torch.arange(w, device=enc.device)[None, :] < lengths[:, None]
    limit = geo.decoder_look_back * geo.chunk
    for block_no, layer in enumerate(decoder.decoders):
        assert layer.self_attn is not None and layer.src_attn is not None  # every block (config.py)
        residual = x
        y = layer.norm2(layer.feed_forward(layer.norm1(x)))
        history = torch.stack([inp.state.decoder_fsmn[block_no] for inp in inputs])  # (B, K-1, D)
        seq = torch.cat([history, y], 1)
        conv = layer.self_attn.fsmn_block(seq.transpose(1, 2)).transpose(1, 2)  # causal: (B, N, D)
        x = residual + conv + y
        kept = history.shape[1]
        for i, inp in enumerate(inputs):
            inp.state.decoder_fsmn[block_no] = seq[i, counts[i] : counts[i] + kept]
        k, v = layer.src_attn.memory_kv(enc)
        past, past_valid = _past([inp.state.decoder_kv[block_no] for inp in inputs], k[:, :, :0])
        kv = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        key_mask = torch.cat([past_valid, valid], 1)[:, None, None, :]
        x = x + layer.src_attn.attend(layer.norm3(x), kv, key_mask)
        if limit > 0:
            for i, inp in enumerate(inputs):
                n = int(lengths[i])
                new = (k[i, :, :n], v[i, :, :n])
                old = inp.state.decoder_kv[block_no]
                inp.state.decoder_kv[block_no] = (
                    torch.cat([old[0], new[0]], 1)[:, -limit:] if old is not None else new[0][:, -limit:],
                    torch.cat([old[1], new[1]], 1)[:, -limit:] if old is not None else new[1][:, -limit:])
    for layer in decoder.decoders3:
        x = layer.feed_forward(layer.norm1(x))
    return decoder.logprobs(decoder.after_norm(x))
