"""NeMo's log-mel front end (`AudioToMelSpectrogramPreprocessor` / `FilterbankFeatures`), offline
and incremental.

Both paths run the same float32 operations in NeMo's order: pre-emphasis, a centred STFT (constant
padding of n_fft/2 at both ends), magnitude, power, the checkpoint's own mel filterbank, the log
with its zero guard, then (offline, `per_feature` models) normalisation over the valid frames.
The window and filterbank come from the checkpoint (`preprocessor.featurizer.window`, `.fb`), so
no librosa is needed.

The incremental path (`MelStream`) emits frame t once the samples it covers have arrived
(t * hop + n_fft / 2), which makes its frames independent of how the audio was sliced. At the
end of input it emits the remaining frames over zero padding and then one frame of `pad_value`:
NeMo's cache-aware buffer takes every STFT frame (1 + N // hop), whose last one is the masked
padding frame, and its streaming tokens depend on that frame.
"""

from __future__ import annotations

import torch

from engine.models.nemo.config import MelConfig

PER_FEATURE_EPS = 1e-5
"""Added to the standard deviation in per_feature normalisation (NeMo's CONSTANT)."""


class MelFrontend:
    def __init__(self, cfg: MelConfig, window: torch.Tensor, filterbank: torch.Tensor) -> None:
        self.cfg = cfg
        self.window = window.float()
        self.fb = filterbank.float()  # (1, n_mels, n_fft // 2 + 1)
        self.pad = cfg.n_fft // 2

    def num_frames(self, num_samples: torch.Tensor) -> torch.Tensor:
        """Valid frames of `num_samples` (NeMo's get_seq_len)."""
        return torch.div(
            num_samples + 2 * self.pad - self.cfg.n_fft, self.cfg.hop_length, rounding_mode="floor"
        )

    def preemphasis(self, x: torch.Tensor, previous: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N) -> (B, N); `previous` (B,) is the raw sample before x[:, 0] (None at a stream's start)."""
        if self.cfg.preemph is None:
            return x
        if previous is None:
            return torch.cat((x[:, :1], x[:, 1:] - self.cfg.preemph * x[:, :-1]), dim=1)
        shifted = torch.cat((previous.unsqueeze(1), x[:, :-1]), dim=1)
        return x - self.cfg.preemph * shifted

    def log_mel(self, padded: torch.Tensor) -> torch.Tensor:
        """(B, n) pre-emphasised, already padded samples -> (B, n_mels, frames) log-mel (no centring)."""
        spec = torch.stft(
            padded, n_fft=self.cfg.n_fft, hop_length=self.cfg.hop_length, win_length=self.cfg.win_length,
            center=False, window=self.window.to(padded.device), return_complex=True,
        )  # fmt: skip
        mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1))
        if self.cfg.mag_power != 1.0:
            mag = mag.pow(self.cfg.mag_power)
        mel = torch.matmul(self.fb.to(mag.device), mag)
        guard = self.cfg.log_guard_value
        if isinstance(guard, str):
            guard = torch.finfo(mel.dtype).tiny if guard == "tiny" else torch.finfo(mel.dtype).eps
        if self.cfg.log_guard_type == "add":
            return torch.log(mel + guard)
        return torch.log(torch.clamp(mel, min=guard))

    def __call__(self, audio: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Offline: (B, N) float32 samples, (B,) lengths -> (B, n_mels, T) features, (B,) valid frames."""
        frames = self.num_frames(lengths)
        x = self.preemphasis(audio.float())
        x = x.masked_fill(torch.arange(x.shape[1], device=x.device)[None, :] >= lengths[:, None], 0.0)
        mel = self.log_mel(torch.nn.functional.pad(x, (self.pad, self.pad)))
        valid = torch.arange(mel.shape[2], device=mel.device)[None, :] < frames[:, None]  # (B, T)
        if self.cfg.per_feature:
            mel = normalize_per_feature(mel, valid)
        return mel.masked_fill(~valid[:, None, :], self.cfg.pad_value), frames


def normalize_per_feature(mel: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Each bin to zero mean, unit (unbiased) std over the valid frames, as NeMo's normalize_batch."""
    mask = valid[:, None, :]
    count = valid.sum(dim=1)[:, None]
    mean = torch.where(mask, mel, 0.0).sum(dim=2) / count
    std = torch.sqrt(torch.where(mask, mel - mean[:, :, None], 0.0).pow(2).sum(dim=2) / (count - 1.0))
    std = std.masked_fill(std.isnan(), 0.0) + PER_FEATURE_EPS
    out = (mel - mean[:, :, None]) / std[:, :, None]
    return out.masked_fill(~mask, 0.0)


class MelStream:
    """One stream's incremental log-mel (models without per_feature normalisation)."""

    def __init__(self, frontend: MelFrontend) -> None:
        self.frontend = frontend
        self.samples = torch.zeros(1, frontend.pad)
        """Pre-emphasised samples in padded coordinates from `base` on (starts with the left pad)."""
        self.base = 0
        self.previous: torch.Tensor | None = None
        """The last raw sample fed (pre-emphasis continues across pieces)."""
        self.received = 0
        self.frames_done = 0

    def feed(self, audio: torch.Tensor) -> torch.Tensor:
        """Append samples; returns the (n_mels, t) frames that became complete."""
        if audio.numel() == 0:
            return self._empty()
        piece = audio.float().reshape(1, -1)
        self.samples = torch.cat((self.samples, self.frontend.preemphasis(piece, self.previous)), dim=1)
        self.previous = piece[:, -1]
        self.received += piece.shape[1]
        hop, pad = self.frontend.cfg.hop_length, self.frontend.pad
        ready = (self.received - pad) // hop + 1 if self.received >= pad else 0
        return self._frames_until(ready)

    def finish(self) -> torch.Tensor:
        """The last frames over zero padding, then NeMo's one padding frame."""
        pad, hop = self.frontend.pad, self.frontend.cfg.hop_length
        if self.received == 0:
            return self._empty()
        self.samples = torch.cat((self.samples, torch.zeros(1, pad)), dim=1)
        valid = self.received // hop
        tail = self._frames_until(valid)
        filler = torch.full((self.frontend.cfg.n_mels, 1), self.frontend.cfg.pad_value)
        return torch.cat((tail, filler), dim=1)

    def _frames_until(self, end: int) -> torch.Tensor:
        if end <= self.frames_done:
            return self._empty()
        hop, n_fft = self.frontend.cfg.hop_length, self.frontend.cfg.n_fft
        start = self.frames_done * hop - self.base
        stop = (end - 1) * hop + n_fft - self.base
        mel = self.frontend.log_mel(self.samples[:, start:stop])[0]
        self.frames_done = end
        keep_from = end * hop - self.base  # the next frame's first sample
        self.samples = self.samples[:, keep_from:]
        self.base += keep_from
        return mel

    def _empty(self) -> torch.Tensor:
        return torch.zeros(self.frontend.cfg.n_mels, 0)
