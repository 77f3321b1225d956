"""FunASR's WavFrontend, batched: Kaldi fbank (hamming window, int16-scaled samples), low frame
rate stacking (LFR) and the checkpoint's CMVN (`am.mvn`).

LFR: output frame i stacks the `lfr_m` fbank frames starting at `i * lfr_n - (lfr_m - 1) // 2`,
indices clamped into the utterance (FunASR pads with copies of the first and last frames);
`ceil(T / lfr_n)` output frames. Dither is a training-time augmentation and is not applied.
"""

from __future__ import annotations

import math
import os

import torch

from engine.errors import CheckpointError
from engine.fbank import FbankOptions
from engine.models.paraformer.config import FrontendConfig
from engine.ops.fbank import KaldiFbank

AUDIO_SCALE = 32768.0
"""FunASR computes fbank on int16-range samples (`upsacle_samples`); float input is in [-1, 1]."""


def load_cmvn(path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(shift, scale) from a Kaldi nnet1 CMVN file (`<AddShift>` and `<Rescale>` rows):
    features are normalised as (x + shift) * scale."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise CheckpointError(f"{os.path.basename(path)}: {exc}") from exc
    rows: dict[str, list[float]] = {}
    for i, line in enumerate(lines[:-1]):
        head = line.split()
        nxt = lines[i + 1].split()
        if head and head[0] in ("<AddShift>", "<Rescale>") and nxt and nxt[0] == "<LearnRateCoef>":
            rows[head[0]] = [float(v) for v in nxt[3:-1]]  # "<LearnRateCoef> 0 [ v... ]"
    if set(rows) != {"<AddShift>", "<Rescale>"} or len(rows["<AddShift>"]) != len(rows["<Rescale>"]):
        raise CheckpointError(f"{os.path.basename(path)}: expected <AddShift> and <Rescale> rows of one length")
    return torch.tensor(rows["<AddShift>"]), torch.tensor(rows["<Rescale>"])


def lfr_frames(num_fbank_frames: int, lfr_n: int) -> int:
    return math.ceil(num_fbank_frames / lfr_n)


class WavFrontend:
    """Waveforms -> normalised LFR features, every waveform's fbank in one batched call."""

    def __init__(self, cfg: FrontendConfig, cmvn: tuple[torch.Tensor, torch.Tensor] | None,
                 device: torch.device) -> None:  # fmt: skip
        self.cfg = cfg
        self.opts = FbankOptions(
            sample_rate=cfg.sample_rate, num_mel_bins=cfg.n_mels, frame_length_ms=cfg.frame_length_ms,
            frame_shift_ms=cfg.frame_shift_ms, window_type=cfg.window,
        )  # fmt: skip
        self.fbank = KaldiFbank(self.opts, device)
        self.device = device
        dim = cfg.n_mels * cfg.lfr_m
        if cmvn is not None and cmvn[0].numel() < dim:
            raise CheckpointError(f"am.mvn has {cmvn[0].numel()} dimensions; the LFR features have {dim}")
        self.shift = None if cmvn is None else cmvn[0][:dim].to(device)
        self.scale = None if cmvn is None else cmvn[1][:dim].to(device)
        left = (cfg.lfr_m - 1) // 2
        self._offsets = torch.arange(cfg.lfr_m, device=device) - left  # (M,)

    @property
    def dim(self) -> int:
        return self.cfg.n_mels * self.cfg.lfr_m

    @property
    def frame_seconds(self) -> float:
        """Seconds per LFR (= encoder) frame: 60 ms for FunASR's 10 ms x 6."""
        return self.cfg.frame_seconds

    def __call__(self, waveforms: list[torch.Tensor]) -> list[torch.Tensor]:
        """Features (frames_i, n_mels * lfr_m) of each 1-D float waveform in [-1, 1]."""
        return [self._lfr_cmvn(f) for f in self.fbanks(waveforms)]

    def fbanks(self, waveforms: list[torch.Tensor]) -> list[torch.Tensor]:
        """Kaldi fbank frames (frames_i, n_mels) of each 1-D float waveform in [-1, 1], one batched call."""
        return self.fbank([w.to(torch.float32) * AUDIO_SCALE for w in waveforms])

    def _lfr_cmvn(self, feats: torch.Tensor) -> torch.Tensor:
        t = feats.shape[0]
        if t == 0:
            return feats.new_zeros(0, self.dim)
        return self.lfr_rows(feats, 0, 0, lfr_frames(t, self.cfg.lfr_n), t)

    def lfr_rows(self, fbank: torch.Tensor, base: int, first: int, stop: int, total: int) -> torch.Tensor:
        """Normalised LFR frames first..stop-1 of an utterance of `total` fbank frames, of which
        `fbank` holds those from `base` on (every frame these read: from first * lfr_n - left)."""
        starts = torch.arange(first, stop, device=fbank.device) * self.cfg.lfr_n
        index = (starts[:, None] + self._offsets[None, :]).clamp_(0, max(total - 1, 0)) - base  # (n, lfr_m)
        out = fbank[index].reshape(stop - first, self.dim)
        if self.shift is not None and self.scale is not None:
            out = (out + self.shift) * self.scale
        return out

    def lfr_available(self, total: int, final: bool) -> int:
        """LFR frames computable from `total` fbank frames: those whose right context has arrived
        (FunASR's WavFrontendOnline emits the same), or all of them once the input ended."""
        if final:
            return lfr_frames(total, self.cfg.lfr_n)
        right = self.cfg.lfr_m - 1 - (self.cfg.lfr_m - 1) // 2  # frames after a window's first centre
        return max((total - 1 - right) // self.cfg.lfr_n + 1, 0) if total > right else 0
