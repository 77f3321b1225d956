"""Zipformer2's encoder: the convolutional subsampler (100 Hz fbank -> 50 Hz) and the multi-rate
stacks (each at 50/ds Hz between a learned downsampling and a repeat-upsampling, joined to its
input by a learned bypass), then a final 2x downsampling to 25 Hz.

Two entry points:
- `forward(feats, lengths)`: whole utterances, full context, batched with padding. Every padded
  position is made to behave as icefall's unpadded run of that utterance alone (zeroed before
  convolutions, masked in attention, the downsamplers' last group padded with the row's own last
  frame), so a row's output does not depend on its batch.
- `step(feats, cache)`: one chunk of `chunk_size` 50 Hz frames per stream, batched, with the
  per-stream caches of `StreamCache` (the left-context keys/values of every attention, the
  convolution tails, the subsampler's ConvNeXt tail and how many frames each stream has seen).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.zipformer.config import CONVNEXT_PAD, EMBED_CHANNELS, EMBED_CONTEXT, ZipformerConfig
from engine.models.zipformer.modules import (
    AttentionWeights,
    BiasNorm,
    Bypass,
    ConvModule,
    FeedForward,
    NonlinAttention,
    SelfAttention,
    rel_positions,
    swoosh_l,
    swoosh_r,
)


class ConvEmbed(nn.Module):
    """icefall's Conv2dSubsampling: three convs (time x freq), a 7x7 ConvNeXt, linear, BiasNorm."""

    def __init__(self, feature_dim: int, out_dim: int) -> None:
        super().__init__()
        # Sequential indices match icefall's (its balancers and activations sit between).
        self.conv = nn.ModuleDict({
            "0": nn.Conv2d(1, 8, 3, padding=(0, 1)),
            "4": nn.Conv2d(8, 32, 3, stride=2),
            "7": nn.Conv2d(32, EMBED_CHANNELS, 3, stride=(1, 2)),
        })  # fmt: skip
        self.convnext = nn.ModuleDict({
            "depthwise_conv": nn.Conv2d(EMBED_CHANNELS, EMBED_CHANNELS, 7, padding=3, groups=EMBED_CHANNELS),
            "pointwise_conv1": nn.Conv2d(EMBED_CHANNELS, 3 * EMBED_CHANNELS, 1),
            "pointwise_conv2": nn.Conv2d(3 * EMBED_CHANNELS, EMBED_CHANNELS, 1),
        })  # fmt: skip
        self.out_width = ((feature_dim - 1) // 2 - 1) // 2
        self.out = nn.Linear(self.out_width * EMBED_CHANNELS, out_dim)
        self.out_norm = BiasNorm(out_dim)

    def _convs(self, feats: torch.Tensor) -> torch.Tensor:
        x = feats.unsqueeze(1)  # (B, 1, T, F)
        for name in ("0", "4", "7"):
            x = swoosh_r(self.conv[name](x))
        return x  # (B, C, (T - 7) // 2, W)

    def _pointwise(self, x: torch.Tensor) -> torch.Tensor:
        """The ConvNeXt's two 1x1 convs as matmuls over the channel axis (1.4x faster than oneDNN's
        1x1 conv on (8, 128, 19, 19) -> 384, one thread)."""
        c1, c2 = self.convnext["pointwise_conv1"], self.convnext["pointwise_conv2"]
        y = x.permute(0, 2, 3, 1)  # (B, T, W, C)
        y = swoosh_l(F.linear(y, c1.weight[:, :, 0, 0], c1.bias))
        return F.linear(y, c2.weight[:, :, 0, 0], c2.bias).permute(0, 3, 1, 2)

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, w = x.shape
        return self.out_norm(self.out(x.transpose(1, 2).reshape(b, t, c * w)))

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, F) -> (B, (T-7)//2, D), lengths (T_i - 7) // 2."""
        x = self._convs(feats)
        out_lengths = (lengths - EMBED_CONTEXT) // 2
        valid = torch.arange(x.shape[2], device=x.device) < out_lengths.unsqueeze(1)  # (B, T')
        x = x * valid[:, None, :, None]  # the ConvNeXt's zero padding at each row's own end
        x = x + self._pointwise(self.convnext["depthwise_conv"](x))
        return self._out(x), out_lengths

    def step(self, feats: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, 2c+13, F), cache (B, C, 3, W) -> (B, c, D), new cache. The last 3 conv frames
        are the ConvNeXt's look-ahead; they are recomputed by the next chunk."""
        x = self._convs(feats)
        t = x.shape[2] - CONVNEXT_PAD
        bypass = x[:, :, :t]
        full = torch.cat([cache, x], dim=2)
        dw = self.convnext["depthwise_conv"]
        y = F.conv2d(full, dw.weight, dw.bias, padding=(0, CONVNEXT_PAD), groups=dw.groups)
        return self._out(bypass + self._pointwise(y)), full[:, :, t : t + CONVNEXT_PAD]


@dataclass
class LayerCache:
    """One layer's streaming state (batch-first): L = left context frames at the stack's rate."""

    key: torch.Tensor  # (B, L, H*qd)
    nonlin: torch.Tensor  # (B, L, 3D/4)
    val1: torch.Tensor  # (B, L, H*vd)
    val2: torch.Tensor  # (B, L, H*vd)
    conv1: torch.Tensor  # (B, D, kernel//2)
    conv2: torch.Tensor  # (B, D, kernel//2)


class ZipformerLayer(nn.Module):
    def __init__(self, cfg: ZipformerConfig, i: int) -> None:
        super().__init__()
        d, heads, ff = cfg.encoder_dim[i], cfg.num_heads[i], cfg.feedforward_dim[i]
        self.bypass = Bypass(d)
        self.bypass_mid = Bypass(d)
        self.bypass_scale = nn.Parameter(torch.full((d,), 0.5))  # in icefall's state dict, unused there too
        self.self_attn_weights = AttentionWeights(d, cfg.pos_dim, heads, cfg.query_head_dim[i], cfg.pos_head_dim[i])
        self.self_attn1 = SelfAttention(d, heads, cfg.value_head_dim[i])
        self.self_attn2 = SelfAttention(d, heads, cfg.value_head_dim[i])
        self.feed_forward1 = FeedForward(d, ff * 3 // 4)
        self.feed_forward2 = FeedForward(d, ff)
        self.feed_forward3 = FeedForward(d, ff * 5 // 4)
        self.nonlin_attention = NonlinAttention(d, 3 * d // 4)
        self.conv_module1 = ConvModule(d, cfg.cnn_module_kernel[i], cfg.causal)
        self.conv_module2 = ConvModule(d, cfg.cnn_module_kernel[i], cfg.causal)
        self.norm = BiasNorm(d)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, pad_mask: torch.Tensor | None,
                lengths: torch.Tensor) -> torch.Tensor:  # fmt: skip
        orig = x
        w, _ = self.self_attn_weights(x, pos, pad_mask)
        x = x + self.feed_forward1(x)
        x = x + self.nonlin_attention(x, w[:, 0:1])[0]
        x = x + self.self_attn1(x, w)[0]
        x = x + self.conv_module1(x, pad_mask, lengths)
        x = x + self.feed_forward2(x)
        x = self.bypass_mid(orig, x)
        x = x + self.self_attn2(x, w)[0]
        x = x + self.conv_module2(x, pad_mask, lengths)
        x = x + self.feed_forward3(x)
        return self.bypass(orig, self.norm(x))


def step_layer(layer: ZipformerLayer, x: torch.Tensor, pos: torch.Tensor, key_mask: torch.Tensor,
               c: LayerCache) -> tuple[torch.Tensor, LayerCache]:  # fmt: skip
    """One chunk through one layer: x (B, T, D) -> (B, T, D), the new caches (last L frames)."""
    left = c.key.shape[1]
    orig = x
    w, keys = layer.self_attn_weights(x, pos, key_mask, c.key)
    x = x + layer.feed_forward1(x)
    na, nonlin = layer.nonlin_attention(x, w[:, 0:1], c.nonlin)
    x = x + na
    sa, val1 = layer.self_attn1(x, w, c.val1)
    x = x + sa
    cv, conv1 = layer.conv_module1.step(x, c.conv1)
    x = x + cv
    x = x + layer.feed_forward2(x)
    x = layer.bypass_mid(orig, x)
    sa, val2 = layer.self_attn2(x, w, c.val2)
    x = x + sa
    cv, conv2 = layer.conv_module2.step(x, c.conv2)
    x = x + cv
    x = x + layer.feed_forward3(x)
    x = layer.bypass(orig, layer.norm(x))
    return x, LayerCache(keys[:, -left:], nonlin[:, -left:], val1[:, -left:], val2[:, -left:], conv1, conv2)


def downsample(x: torch.Tensor, weights_logits: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """(B, T, C) -> (B, ceil(T/ds), C): softmax-weighted sum of each group of ds frames. A row's
    last group is completed with its own last valid frame (icefall pads the unpadded sequence so)."""
    ds = weights_logits.shape[0]
    b, t, c = x.shape
    groups = (t + ds - 1) // ds
    idx = torch.arange(groups * ds, device=x.device).unsqueeze(0)  # (1, G*ds)
    last = (lengths if lengths is not None else torch.full((b,), t, device=x.device)) - 1
    idx = torch.minimum(idx, last.unsqueeze(1).clamp_min(0))  # (B, G*ds)
    x = x.gather(1, idx.unsqueeze(-1).expand(b, groups * ds, c))
    w = weights_logits.softmax(dim=0)
    return (x.reshape(b, groups, ds, c) * w[:, None]).sum(dim=2)


class Downsample(nn.Module):
    def __init__(self, ds: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(ds))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        return downsample(x, self.bias, lengths)


class ZipformerStack(nn.Module):
    """One encoder stack at 50/ds Hz (icefall's Zipformer2Encoder, wrapped by
    DownsampledZipformer2Encoder when ds > 1)."""

    def __init__(self, cfg: ZipformerConfig, i: int) -> None:
        super().__init__()
        self.ds = cfg.downsampling_factor[i]
        self.pos_dim = cfg.pos_dim
        self.layers = nn.ModuleList([ZipformerLayer(cfg, i) for _ in range(cfg.num_encoder_layers[i])])
        if self.ds > 1:
            self.downsample = Downsample(self.ds)
            self.out_combiner = Bypass(cfg.encoder_dim[i])

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        orig = x
        if self.ds > 1:
            x = self.downsample(x, lengths)
        sub_len = (lengths + self.ds - 1) // self.ds
        t = x.shape[1]
        pad_mask = torch.arange(t, device=x.device) >= sub_len.unsqueeze(1)
        pad_mask_or_none = pad_mask if bool(pad_mask.any()) else None
        pos = rel_positions(self.pos_dim, t, 0).to(x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, pos, pad_mask_or_none, sub_len)
        if self.ds > 1:
            x = x.repeat_interleave(self.ds, dim=1)[:, : orig.shape[1]]
            x = self.out_combiner(orig, x)
        return x

    def step(self, x: torch.Tensor, key_mask: torch.Tensor, caches: list[LayerCache]) -> tuple[torch.Tensor, list[LayerCache]]:
        """x (B, c, D) at 50 Hz; key_mask (B, L50 + c) at 50 Hz (icefall subsamples it by ds)."""
        orig = x
        if self.ds > 1:
            x = self.downsample(x, None)
        mask = key_mask[:, :: self.ds]
        left = caches[0].key.shape[1] if caches else 0
        pos = rel_positions(self.pos_dim, x.shape[1], left).to(x.device, x.dtype)
        new = []
        for layer, c in zip(self.layers, caches, strict=True):
            x, nc = step_layer(layer, x, pos, mask, c)  # type: ignore[arg-type]  # ModuleList items
            new.append(nc)
        if self.ds > 1:
            x = x.repeat_interleave(self.ds, dim=1)[:, : orig.shape[1]]
            x = self.out_combiner(orig, x)
        return x, new


def convert_channels(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Truncate or zero-extend the channel axis to `dim`."""
    if dim <= x.shape[-1]:
        return x[..., :dim]
    return F.pad(x, (0, dim - x.shape[-1]))


class ZipformerEncoder(nn.Module):
    """Embed + stacks + output downsampling; state dict prefixes `encoder_embed.` and `encoder.`."""

    def __init__(self, cfg: ZipformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = ConvEmbed(cfg.feature_dim, cfg.encoder_dim[0])
        self.encoders = nn.ModuleList([ZipformerStack(cfg, i) for i in range(cfg.num_stacks)])
        self.downsample_output = Downsample(2)

    def _combine(self, outputs: list[torch.Tensor]) -> torch.Tensor:
        """The last stack's output, widened to the largest dim with the channels of the latest
        earlier stack that has them."""
        dims = self.cfg.encoder_dim
        pieces, cur = [outputs[-1]], dims[-1]
        for i in range(len(dims) - 2, -1, -1):
            if dims[i] > cur:
                pieces.append(outputs[i][..., cur : dims[i]])
                cur = dims[i]
        return torch.cat(pieces, dim=-1)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, 80) -> (B, T', output_dim) at 25 Hz, lengths."""
        x, x_len = self.embed(feats, lengths)
        outputs = []
        for i, stack in enumerate(self.encoders):
            x = stack(convert_channels(x, self.cfg.encoder_dim[i]), x_len)
            outputs.append(x)
        x = self.downsample_output(self._combine(outputs), x_len)
        return x, (x_len + 1) // 2

    def step(self, feats: torch.Tensor, embed_cache: torch.Tensor, processed: torch.Tensor, left: int,
             caches: list[list[LayerCache]]) -> tuple[torch.Tensor, torch.Tensor, list[list[LayerCache]]]:  # fmt: skip
        """One chunk per stream: feats (B, 2c+13, 80); processed (B,) 50 Hz frames each stream has
        already been through (its left context is valid only that far back); `left` the left
        context in 50 Hz frames. Returns (B, c/2, output_dim), the new embed cache, layer caches."""
        x, embed_cache = self.embed.step(feats, embed_cache)
        c = x.shape[1]
        seen = torch.arange(left, device=x.device).flip(0)  # cache slot m holds the frame left-m steps back
        left_mask = processed.unsqueeze(1) <= seen.unsqueeze(0)  # (B, left): not yet seen
        key_mask = torch.cat([left_mask, torch.zeros(x.shape[0], c, dtype=torch.bool, device=x.device)], dim=1)
        outputs, new = [], []
        for i, stack in enumerate(self.encoders):
            x, nc = stack.step(convert_channels(x, self.cfg.encoder_dim[i]), key_mask, caches[i])
            outputs.append(x)
            new.append(nc)
        x = self.downsample_output(self._combine(outputs), None)
        return x, embed_cache, new
