"""icefall's features: 80-bin Kaldi fbank, dither 0, samples in [-1, 1], snip_edges=False, mel
banks from 20 Hz to 7600 Hz (`high_freq=-400`, 400 Hz below Nyquist). That is what the models were
trained on: icefall's recipes compute their training features with lhotse, whose `FbankConfig`
defaults to high_freq=-400; icefall's own pretrained.py / jit / onnx scripts and sherpa-onnx (the
server icefall models are deployed with) set it too. (icefall's streaming_decode.py alone builds a
kaldifeat `FbankOptions` without it, Kaldi's default of Nyquist, 8000 Hz, unlike its training
features.) Frame i is centred on sample 160 i + 80, its
25 ms window starting 120 samples before 160 i, the waveform mirrored at both ends; an utterance of
N samples has (N + 80) // 160 frames.

`FbankStream` frames a stream as its samples arrive: frame i is emitted once sample 160 i + 280
has arrived; the frames whose window crosses the end are emitted at `finish()`, mirrored there.
`frames_of` windows several streams' new samples and `compute` turns all their frames into
features in one call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from engine.fbank import FbankOptions, log_mel_frames, mel_banks, povey_window

OPTS = FbankOptions(sample_rate=16000, num_mel_bins=80, high_freq=-400.0)
SHIFT = OPTS.window_shift  # 160 samples = 10 ms
WINDOW = OPTS.window_size  # 400 samples = 25 ms
LEAD = (WINDOW - SHIFT) // 2
"""Samples a frame's window starts before 160 i (120)."""
LOG_EPS = float(np.log(1e-10))
"""icefall's padding value for feature frames past the end (log of 1e-10)."""


@dataclass
class FbankStream:
    samples: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    """Received samples from absolute position `base` on."""
    base: int = 0
    received: int = 0
    emitted: int = 0
    finished: bool = False

    def feed(self, audio: np.ndarray) -> np.ndarray:
        """Windows (n, 400) of the frames the new samples complete."""
        self.samples = np.concatenate([self.samples, np.asarray(audio, dtype=np.float32)])
        self.received += len(audio)
        ready = max(0, (self.received - (WINDOW - LEAD)) // SHIFT + 1)  # 160 i + 280 <= received
        return self._take(ready)

    def finish(self) -> np.ndarray:
        """Windows of the remaining frames, mirrored at the end."""
        self.finished = True
        return self._take((self.received + SHIFT // 2) // SHIFT)

    def _take(self, upto: int) -> np.ndarray:
        if upto <= self.emitted or self.received == 0:
            return np.zeros((0, WINDOW), dtype=np.float32)
        starts = np.arange(self.emitted, upto) * SHIFT - LEAD
        idx = starts[:, None] + np.arange(WINDOW)[None, :]  # absolute sample indices
        n = self.received
        idx = np.where(idx < 0, -idx - 1, idx)  # only frame 0 reaches before the start
        if self.finished:
            idx = np.where(idx >= n, 2 * n - 1 - idx, idx)  # mirrored tail stays within this frame's span
        idx = np.clip(idx, self.base, n - 1)  # an utterance shorter than a window mirrors once
        frames = self.samples[idx - self.base]
        self.emitted = upto
        # Later frames start at 160 i - 120 >= 40: samples before the next one's start are done.
        keep_from = self.emitted * SHIFT - LEAD
        if keep_from > self.base:
            self.samples = self.samples[keep_from - self.base :]
            self.base = keep_from
        return frames


class Featurizer:
    """Windows -> log-mel features, every stream's frames in one computation."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @cached_property
    def _window(self) -> torch.Tensor:
        return povey_window(WINDOW).to(self.device)

    @cached_property
    def _banks(self) -> torch.Tensor:
        return mel_banks(OPTS).to(self.device)

    def compute(self, windows: list[np.ndarray]) -> list[torch.Tensor]:
        counts = [len(w) for w in windows]
        if sum(counts) == 0:
            return [torch.zeros(0, OPTS.num_mel_bins) for _ in windows]
        frames = torch.from_numpy(np.concatenate([w for w in windows if len(w)])).to(self.device)
        feats = log_mel_frames(frames, self._window, self._banks, OPTS).cpu()
        return list(torch.split(feats, counts))

    def utterance(self, audio: np.ndarray) -> torch.Tensor:
        """(frames, 80) features of a whole waveform."""
        stream = FbankStream()
        windows = np.concatenate([stream.feed(audio), stream.finish()])
        return self.compute([windows])[0]
