"""The CIF predictor (continuous integrate-and-fire) of FunASR's Paraformer (CifPredictorV2).

A convolution over the encoder output gives each frame a weight alpha in [0, 1]; integrating the
weights along time, a token "fires" each time the running sum crosses an integer, and its
acoustic embedding is the alpha-weighted sum of the frames since the previous fire (a frame that
straddles a crossing is split between the two tokens). The token count is floor(sum of alphas)
after `tail_threshold` is added just past the last frame, so a trailing part-token still fires.

As in FunASR (`cif_v1`), the running sum is a float64 cumulative sum cast to float32, and the
embeddings come from differences of a float32 cumulative sum of alpha * hidden; a token is fired
where floor(running sum) steps up, whatever `threshold` says.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine.models.paraformer.config import PredictorConfig


@dataclass
class CifOutput:
    embeds: torch.Tensor
    """(B, N, D) acoustic embeddings, N = the largest token count; rows zero past their count."""
    token_counts: torch.Tensor
    """(B,) long: tokens each row fires (floor of its alpha sum)."""
    alphas: torch.Tensor
    """(B, T + 1) frame weights including the tail frame (T without a tail threshold)."""
    fires: torch.Tensor
    """Like alphas: 1 + fractional running sum at a fire, the fractional running sum elsewhere."""


class CifPredictor(nn.Module):
    def __init__(self, cfg: PredictorConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.cif_conv1d = nn.Conv1d(cfg.idim, cfg.idim, cfg.l_order + cfg.r_order + 1)
        self.cif_output = nn.Linear(cfg.idim, 1)

    def forward(self, hidden: torch.Tensor, lengths: torch.Tensor) -> CifOutput:
        """hidden (B, T, D) with padded frames zero (so a row's last frame sees zero right context,
        as it does alone), lengths (B,)."""
        cfg = self.cfg
        b, t, d = hidden.shape
        ctx = nn.functional.pad(hidden.transpose(1, 2), (cfg.l_order, cfg.r_order))
        out = self.cif_output(torch.relu(self.cif_conv1d(ctx)).transpose(1, 2))  # (B, T, 1)
        # integration in float32 whatever the model's dtype (FunASR runs the predictor outside
        # autocast): a float16 running sum would miscount tokens past a few hundred
        dtype = hidden.dtype
        hidden, out = hidden.float(), out.float()
        valid = (torch.arange(t, device=hidden.device)[None, :] < lengths[:, None]).float()
        alphas = torch.relu(torch.sigmoid(out) * cfg.smooth_factor - cfg.noise_threshold).squeeze(-1) * valid
        if cfg.tail_threshold > 0:
            # tail_threshold on the first frame past each row's end, over a zero frame
            one, zero = torch.ones(b, 1, device=hidden.device), torch.zeros(b, 1, device=hidden.device)
            tail = torch.cat([one, valid], 1) - torch.cat([valid, zero], 1)
            alphas = torch.cat([alphas, zero], 1) + tail * cfg.tail_threshold
            hidden = torch.cat([hidden, hidden.new_zeros(b, 1, d)], 1)
            counts = torch.floor(alphas.sum(-1))
        else:
            counts = torch.round(alphas.sum(-1))
        embeds, fires = integrate_and_fire(hidden, alphas)
        if cfg.tail_threshold > 0:
            embeds = embeds[:, : int(counts.max().item()) if b else 0]
        return CifOutput(embeds.to(dtype), counts.long(), alphas, fires)


def integrate_and_fire(hidden: torch.Tensor, alphas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(embeds (B, N, D), fires (B, T)) for hidden (B, T, D), alphas (B, T); N = the largest
    rounded alpha sum."""
    b, _t, d = hidden.shape
    running = torch.cumsum(alphas, dim=1, dtype=torch.float64).to(torch.float32)
    floor = torch.floor(running)
    before = torch.roll(floor, 1, dims=1)
    before[:, 0] = 0
    fired = (floor - before) > 0  # (B, T)
    fires = fired.to(alphas.dtype) + running - floor
    max_tokens = int(torch.round(alphas.sum(-1)).max().item()) if b else 0
    if not bool(fired.any()):
        return hidden.new_zeros(b, max_tokens, d), fires
    summed = torch.cumsum(alphas.unsqueeze(-1) * hidden, dim=1)  # (B, T, D)
    remain = (fires - torch.floor(fires))[fired].unsqueeze(-1) * hidden[fired]  # part past each fire
    at_fire = summed[fired]  # (F, D), row-major over (batch, time)
    per_row = fired.sum(1)
    first = torch.cumsum(per_row, 0) - per_row  # index of each row's first fire in the flat list
    prev_sum = torch.roll(at_fire, 1, dims=0)
    prev_remain = torch.roll(remain, 1, dims=0)
    starts = first[per_row > 0]
    prev_sum[starts] = 0
    prev_remain[starts] = 0
    tokens = at_fire - prev_sum + prev_remain - remain
    width = max(max_tokens, int(per_row.max().item()))
    full = hidden.new_zeros(b, width, d)
    full[torch.arange(width, device=hidden.device)[None, :] < per_row[:, None]] = tokens
    return full[:, :max_tokens], fires
