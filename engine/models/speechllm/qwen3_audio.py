"""Qwen3-ASR's audio encoder (AuT): its log-mel front end, a per-second convolution stack and a
transformer that attends within windows of a few seconds.

The mel is Whisper's arithmetic over the clip alone (reflect-centred STFT, no 30 s padding, the
clip's own 8-decade floor), padded with zeros to whole seconds. Each second (100 frames) goes
through three stride-2 2-D convolutions on its own (13 positions per second) with sinusoid
positions restarting every second; the positions holding audio are packed and attend within
windows of `n_window_infer` frames' worth of positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.log_mel import HOP_LENGTH, N_FFT, mel_filters
from engine.models.speechllm.model import EncoderLayer

MIN_SAMPLES = 8000
"""Clips shorter than 0.5 s (at 16 kHz) are zero-padded to it first (the reference does, masks included)."""
CONV_LAYERS = 3  # stride-2 convolutions: 8x down in time and in frequency


@dataclass(frozen=True)
class Qwen3AudioDims:
    n_mels: int
    d_model: int
    layers: int
    heads: int
    ffn: int
    conv_channels: int
    n_window: int
    """Half a convolution chunk, in mel frames (50: chunks of 1 s)."""
    n_window_infer: int
    """Mel frames' worth of positions one attention window spans."""
    max_positions: int
    """Sinusoid positions (per chunk)."""


def _strided(length: int) -> int:
    """Length after the three (kernel 3, stride 2, padding 1) convolutions; 0 stays 0."""
    for _ in range(CONV_LAYERS):
        length = (length - 1) // 2 + 1 if length > 0 else 0
    return length


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> Tensor:
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2).float())
    scaled = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


class Qwen3AudioEncoder(nn.Module):
    positions: Tensor
    filters: Tensor
    window: Tensor

    def __init__(self, dims: Qwen3AudioDims) -> None:
        super().__init__()
        self.dims = dims
        ch = dims.conv_channels
        self.conv2d1 = nn.Conv2d(1, ch, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(ch, ch, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(ch, ch, 3, 2, padding=1)
        freq = dims.n_mels
        for _ in range(CONV_LAYERS):
            freq = (freq + 1) // 2
        self.conv_out = nn.Linear(ch * freq, dims.d_model, bias=False)
        self.layers = nn.ModuleList(EncoderLayer(dims.d_model, dims.heads, dims.ffn, whisper=False)
                                    for _ in range(dims.layers))
        self.ln_post = nn.LayerNorm(dims.d_model)
        self.register_buffer("positions", sinusoids(dims.max_positions, dims.d_model), persistent=False)
        self.register_buffer("filters", torch.from_numpy(mel_filters(dims.n_mels)), persistent=False)
        self.register_buffer("window", torch.hann_window(N_FFT), persistent=False)

    @property
    def chunk(self) -> int:
        return 2 * self.dims.n_window

    def frames(self, samples: int) -> int:
        return max(samples, MIN_SAMPLES) // HOP_LENGTH

    def tokens(self, samples: int) -> int:
        frames = self.frames(samples)
        return (frames // self.chunk) * _strided(self.chunk) + _strided(frames % self.chunk)

    def mel(self, audio: np.ndarray) -> Tensor:
        """(n_mels, frames) log-mel of the clip alone."""
        x = torch.from_numpy(np.require(audio, np.float32, ["C", "W"])).to(self.filters.device)
        if x.shape[0] < MIN_SAMPLES:
            x = F.pad(x, (0, MIN_SAMPLES - x.shape[0]))
        stft = torch.stft(x, N_FFT, HOP_LENGTH, window=self.window, return_complex=True)  # centred, reflect
        power = stft[..., :-1].abs() ** 2
        log_spec = torch.clamp(self.filters @ power, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        return (log_spec + 4.0) / 4.0

    def encode(self, audio: np.ndarray) -> Tensor:
        """Waveform (16 kHz) -> (tokens, d_model)."""
        mel = self.mel(audio)
        frames = mel.shape[1]
        chunks = math.ceil(frames / self.chunk)
        mel = F.pad(mel, (0, chunks * self.chunk - frames)).to(self.conv_out.weight.dtype)  # zeros: the reference's
        x = mel.view(self.dims.n_mels, chunks, self.chunk).permute(1, 0, 2)[:, None]  # (C, 1, n_mels, chunk)
        x = F.gelu(self.conv2d3(F.gelu(self.conv2d2(F.gelu(self.conv2d1(x))))))  # (C, ch, f, t)
        c, ch, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(c, t, ch * f)) + self.positions[:t].to(x.dtype)
        lengths = [self.chunk] * (chunks - 1) + [frames - self.chunk * (chunks - 1)]
        valid = [_strided(n) for n in lengths]
        h = torch.cat([x[i, :n] for i, n in enumerate(valid)])  # (P, d): the positions holding audio
        window = max(valid) * (self.dims.n_window_infer // self.chunk)
        for layer in self.layers:
            h = torch.cat([layer(w[None])[0] for w in torch.split(h, window)])
        out: Tensor = self.ln_post(h)
        return out
