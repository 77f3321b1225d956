"""Kaldi-compatible log-mel filterbank features in torch, batched over many waveforms.

Matches `compute-fbank-feats` / `kaldi-native-fbank` / `torchaudio.compliance.kaldi.fbank` with
dither 0, snip_edges, a povey (or hamming) window, pre-emphasis, DC removal, power spectrum and a log floor of
FLT_EPSILON: the features WeNet-style checkpoints were trained on. Frames are computed
independently of each other, so a stream can be featurized piecewise (see `frames_for`) and
get exactly the frames an utterance-level call would produce.

Arithmetic is float32 throughout, as in Kaldi: in near-empty mel bins (a few dB above the
FFT's rounding noise) float64 would be more exact yet differ from every float32 Kaldi
implementation by more than 1e-3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

FLT_EPSILON = 1.1920928955078125e-07
"""Kaldi's log floor: log(max(energy, FLT_EPSILON))."""


@dataclass(frozen=True)
class FbankOptions:
    sample_rate: int = 16000
    """Hz."""
    num_mel_bins: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    preemph_coeff: float = 0.97
    low_freq: float = 20.0
    """Hz, lower edge of the first mel bin."""
    high_freq: float = 0.0
    """Hz, upper edge of the last mel bin; <= 0 is an offset from Nyquist (Kaldi convention)."""
    window_type: str = "povey"
    """Kaldi's frame window: 'povey' (WeNet), 'hamming' (FunASR), 'hanning' or 'rectangular'."""

    @property
    def window_size(self) -> int:
        """Samples per frame (400 at 16 kHz / 25 ms)."""
        return int(self.sample_rate * self.frame_length_ms / 1000)

    @property
    def window_shift(self) -> int:
        """Samples between frame starts (160 at 16 kHz / 10 ms)."""
        return int(self.sample_rate * self.frame_shift_ms / 1000)

    @property
    def padded_window_size(self) -> int:
        return 1 << (self.window_size - 1).bit_length()


def frames_for(num_samples: int, opts: FbankOptions) -> int:
    """Frames snip_edges framing yields for `num_samples` samples."""
    if num_samples < opts.window_size:
        return 0
    return 1 + (num_samples - opts.window_size) // opts.window_shift


def join_tail(tail: torch.Tensor, new: torch.Tensor, opts: FbankOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """A stream's `new` samples after the `tail` its last call left: the wave to frame now, and the
    tail to keep, from the first sample of the next whole frame on (frames overlap, so it is more
    than the samples no frame covered yet)."""
    wave = torch.cat([tail, new]) if len(tail) else new
    used = frames_for(len(wave), opts) * opts.window_shift
    return wave, wave[used:]


def _mel(freq: torch.Tensor) -> torch.Tensor:
    return 1127.0 * torch.log1p(freq / 700.0)


def mel_banks(opts: FbankOptions) -> torch.Tensor:
    """(num_fft_bins, num_mel_bins) triangular weights, Kaldi's MelBanks (non-HTK)."""
    num_fft_bins = opts.padded_window_size // 2  # Kaldi drops the Nyquist bin
    nyquist = 0.5 * opts.sample_rate
    high = opts.high_freq if opts.high_freq > 0 else nyquist + opts.high_freq
    mel_low, mel_high = (
        _mel(torch.tensor(opts.low_freq, dtype=torch.float32)),
        _mel(torch.tensor(high, dtype=torch.float32)),
    )
    delta = (mel_high - mel_low) / (opts.num_mel_bins + 1)
    bins = torch.arange(opts.num_mel_bins, dtype=torch.float32).unsqueeze(0)  # (1, M)
    left, center, right = mel_low + bins * delta, mel_low + (bins + 1) * delta, mel_low + (bins + 2) * delta
    fft_mel = _mel(
        torch.arange(num_fft_bins, dtype=torch.float32) * opts.sample_rate / opts.padded_window_size
    )
    fft_mel = fft_mel.unsqueeze(1)  # (F, 1)
    up = (fft_mel - left) / (center - left)
    down = (right - fft_mel) / (right - center)
    weights = torch.where(fft_mel <= center, up, down)
    inside = (fft_mel > left) & (fft_mel < right)
    return torch.where(inside, weights, torch.zeros_like(weights))


def povey_window(size: int) -> torch.Tensor:
    n = torch.arange(size, dtype=torch.float32)
    return (0.5 - 0.5 * torch.cos(2 * math.pi * n / (size - 1))).pow(0.85)


def frame_window(opts: FbankOptions) -> torch.Tensor:
    """The window Kaldi's FeatureWindowFunction applies to each frame (float32)."""
    size = opts.window_size
    n = torch.arange(size, dtype=torch.float32)
    if opts.window_type == "povey":
        return povey_window(size)
    if opts.window_type == "hamming":
        return 0.54 - 0.46 * torch.cos(2 * math.pi * n / (size - 1))
    if opts.window_type == "hanning":
        return 0.5 - 0.5 * torch.cos(2 * math.pi * n / (size - 1))
    if opts.window_type == "rectangular":
        return torch.ones(size)
    raise ValueError(f"unknown window_type {opts.window_type!r} (povey, hamming, hanning, rectangular)")


def log_mel_frames(
    frames: torch.Tensor, window: torch.Tensor, banks: torch.Tensor, opts: FbankOptions
) -> torch.Tensor:
    """Log-mel energies of frames (N, window_size) float32 -> (N, num_mel_bins)."""
    frames = frames - frames.mean(dim=1, keepdim=True)  # remove DC offset
    # Pre-emphasis within the frame; the first sample uses itself as predecessor (Kaldi).
    prev = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)
    frames = (frames - opts.preemph_coeff * prev) * window
    spectrum = torch.fft.rfft(frames, n=opts.padded_window_size, dim=1)  # (N, P/2 + 1)
    power = spectrum.real.square() + spectrum.imag.square()
    mel = power[:, : opts.padded_window_size // 2] @ banks  # (N, M)
    return torch.log(mel.clamp_min(FLT_EPSILON)).float()
