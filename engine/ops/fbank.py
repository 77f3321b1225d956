"""Kaldi fbank of many streams' new samples in one call: `torch.ops.oasr.kaldi_fbank` (a CUDA
kernel, one thread block per frame; its CPU twin exists for tests and benchmarks) or the
reference (engine/fbank.py's torch computation). `KaldiFbank` (below) uses the kernel on
CUDA devices; on CPU torch's pocketfft + GEMM path is faster (benchmarks/kernels.py) and stays.

    feats = kaldi_fbank(waveform, frame_starts, window, mel_banks, twiddle, preemph)

waveform (N,) float32: samples of all streams, concatenated; frame_starts (F,) int64: first
sample of each frame (frames of one stream never cross into the next); window (W,) the Povey
window; mel_banks (P/2, M); twiddle (P/2, 2) = cos, sin of -2 pi k / P (`fft_twiddle`).
Returns (F, M) log-mel energies.
"""

from __future__ import annotations

import functools
import math
from functools import cached_property

import torch

from engine.fbank import FbankOptions, frame_window, frames_for, log_mel_frames, mel_banks
from engine.ops.extension import kernel_for
from engine.ops.extension import use_extension as resolve_use_extension

__all__ = ["KaldiFbank", "fft_twiddle", "kaldi_fbank", "kaldi_fbank_batched", "kaldi_fbank_reference", "kernel_for"]


@functools.lru_cache(maxsize=8)
def fft_twiddle(fft_size: int, device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """(P/2, 2) float32: cos and sin of -2 pi k / P, computed in float64 then rounded."""
    angle = torch.arange(fft_size // 2, dtype=torch.float64) * (-2 * math.pi / fft_size)
    return torch.stack([torch.cos(angle), torch.sin(angle)], dim=1).float().to(device)


def kaldi_fbank_reference(
    waveform: torch.Tensor, frame_starts: torch.Tensor, window: torch.Tensor, mel_banks: torch.Tensor,
    twiddle: torch.Tensor, preemph: float,
) -> torch.Tensor:  # fmt: skip
    size = int(window.shape[0])
    frames = waveform[frame_starts.unsqueeze(1) + torch.arange(size, device=waveform.device)]  # (F, W)
    opts = FbankOptions(num_mel_bins=int(mel_banks.shape[1]), preemph_coeff=preemph)
    assert opts.padded_window_size == 2 * twiddle.shape[0] or frames.shape[0] == 0
    return log_mel_frames(frames, window, mel_banks, opts)


def kaldi_fbank(
    waveform: torch.Tensor, frame_starts: torch.Tensor, window: torch.Tensor, mel_banks: torch.Tensor,
    twiddle: torch.Tensor, preemph: float, *, use_extension: bool | None = None,
) -> torch.Tensor:  # fmt: skip
    args = (waveform, frame_starts, window, mel_banks, twiddle, preemph)
    if use_extension is None:
        use_extension = kernel_for(waveform.device)
    if resolve_use_extension(use_extension):
        return torch.ops.oasr.kaldi_fbank(*args)
    return kaldi_fbank_reference(*args)


def kaldi_fbank_batched(
    waveforms: list[torch.Tensor], window: torch.Tensor, mel_banks: torch.Tensor, opts: FbankOptions,
    *, use_extension: bool | None = None,
) -> list[torch.Tensor]:  # fmt: skip
    """Features of each 1-D waveform (frames_i, M), every frame of every waveform in one call."""
    device = window.device
    counts = [frames_for(int(w.shape[0]), opts) for w in waveforms]
    lengths = [int(w.shape[0]) for w in waveforms]
    wave = torch.cat([w.to(device, torch.float32) for w in waveforms]) if waveforms else window.new_zeros(0)
    offsets = torch.tensor([0, *lengths[:-1]], dtype=torch.long).cumsum(0)
    starts = torch.cat(
        [o + torch.arange(n, dtype=torch.long) * opts.window_shift for o, n in zip(offsets.tolist(), counts, strict=True)]
    ) if waveforms else torch.zeros(0, dtype=torch.long)  # fmt: skip
    feats = kaldi_fbank(wave, starts.to(device), window, mel_banks, fft_twiddle(opts.padded_window_size, device),
                        opts.preemph_coeff, use_extension=use_extension)  # fmt: skip
    return list(torch.split(feats, counts))


class KaldiFbank:
    """Batched Kaldi fbank on one device. Waveforms must already be scaled (WeNet: × 32768)."""

    def __init__(self, opts: FbankOptions | None = None, device: torch.device | str = "cpu") -> None:
        self.opts = opts or FbankOptions()
        self.device = torch.device(device)

    @cached_property
    def _window(self) -> torch.Tensor:
        return frame_window(self.opts).to(self.device, torch.float32)

    @cached_property
    def _banks(self) -> torch.Tensor:
        return mel_banks(self.opts).to(self.device, torch.float32)

    def __call__(self, waveforms: list[torch.Tensor]) -> list[torch.Tensor]:
        """Features of each 1-D waveform, (frames_i, num_mel_bins) float32, in ONE batched
        computation: every waveform is framed as a view, frames of all of them are stacked
        without padding, transformed together, and split back."""
        if self.device.type == "cuda" and kernel_for(self.device):  # one launch: every frame of every stream
            return kaldi_fbank_batched(waveforms, self._window, self._banks, self.opts)
        opts = self.opts
        counts = [frames_for(int(w.shape[0]), opts) for w in waveforms]
        framed = [
            w.to(self.device, torch.float32).unfold(0, opts.window_size, opts.window_shift)
            for w, n in zip(waveforms, counts, strict=True)
            if n > 0
        ]
        if not framed:
            return [torch.zeros(0, opts.num_mel_bins, device=self.device) for _ in waveforms]
        frames = torch.cat(framed, dim=0)  # (N, window_size)
        feats = self._compute(frames)
        out = list(torch.split(feats, [n for n in counts if n > 0]))
        it = iter(out)
        return [next(it) if n > 0 else feats.new_zeros(0, opts.num_mel_bins) for n in counts]

    def _compute(self, frames: torch.Tensor) -> torch.Tensor:
        return log_mel_frames(frames, self._window, self._banks, self.opts)
