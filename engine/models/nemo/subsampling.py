"""NeMo's ConvSubsampling ('dw_striding' and 'striding', factor 2**n), causal or not.

Module layout matches NeMo's state dict (`pre_encode.conv.<i>`, `pre_encode.out`). Like NeMo 3.0's
MaskedConvSequential, frames past each row's length are zeroed before every layer, so a padded
row of a batch computes what it computes alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

KERNEL = 3
STRIDE = 2


class ConvSubsampling(nn.Module):
    def __init__(
        self, kind: str, factor: int, feat_in: int, d_model: int, channels: int, causal: bool
    ) -> None:
        super().__init__()
        self.causal = causal
        self.stages = int(math.log2(factor))
        # Causal: pad 2 before and 1 after on both axes (NeMo's CausalConv2D); else 1 on each side.
        self.pads = (KERNEL - 1, STRIDE - 1) if causal else ((KERNEL - 1) // 2, (KERNEL - 1) // 2)
        conv_pad = 0 if causal else self.pads[0]
        layers: list[nn.Module] = []
        in_ch = 1
        for i in range(self.stages):
            if kind == "dw_striding" and i > 0:  # depthwise strided conv, then pointwise
                layers += [nn.Conv2d(in_ch, in_ch, KERNEL, STRIDE, conv_pad, groups=in_ch),
                           nn.Conv2d(in_ch, channels, 1), nn.ReLU()]  # fmt: skip
            else:
                layers += [nn.Conv2d(in_ch, channels, KERNEL, STRIDE, conv_pad), nn.ReLU()]
            in_ch = channels
        self.conv = nn.Sequential(*layers)
        freq = feat_in
        for _ in range(self.stages):
            freq = (freq + sum(self.pads) - KERNEL) // STRIDE + 1
        self.out = nn.Linear(channels * freq, d_model)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        for _ in range(self.stages):
            lengths = torch.div(lengths + sum(self.pads) - KERNEL, STRIDE, rounding_mode="floor") + 1
        return lengths

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, F) features, lengths (B,) -> (B, T', d_model), (B,)."""
        x = x.unsqueeze(1)  # (B, 1, T, F)
        for layer in self.conv:
            x = x * _time_mask(x, lengths)
            if isinstance(layer, nn.Conv2d) and layer.stride != (1, 1):
                if self.causal:
                    x = F.pad(x, (self.pads[0], self.pads[1], self.pads[0], self.pads[1]))
                x = layer(x)
                lengths = torch.div(lengths + sum(self.pads) - KERNEL, STRIDE, rounding_mode="floor") + 1
            else:
                x = layer(x)
        x = x * _time_mask(x, lengths)
        b, c, t, f = x.shape
        return self.out(x.transpose(1, 2).reshape(b, t, c * f)), lengths


def _time_mask(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, 1, T, 1) of 1.0 inside each row's length, 0.0 past it."""
    valid = torch.arange(x.shape[2], device=x.device)[None, :] < lengths[:, None]
    return valid.to(x.dtype)[:, None, :, None]
