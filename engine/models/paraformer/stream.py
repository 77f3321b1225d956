"""A paraformer-online request's state between engine steps: its unconsumed audio and features,
where its chunks stand, the model's caches and the tokens so far."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from engine.models.paraformer.online import OnlineState
from engine.request import Request


@dataclass(eq=False)
class OnlineStream:
    request: Request
    state: OnlineState
    wave_tail: torch.Tensor
    """Samples not yet covered by a whole fbank frame."""
    fbank: torch.Tensor
    """(n, n_mels) fbank frames from `fbank_base` on: those the next LFR frames still read."""
    feats: torch.Tensor
    """(n, input_size) normalised LFR frames not yet given to a chunk."""
    offline_audio: np.ndarray | None = None
    """An offline request's audio, until it is featurized."""
    fbank_base: int = 0
    fbank_total: int = 0
    lfr_done: int = 0
    """LFR frames computed so far."""
    samples: int = 0
    """Audio samples taken in so far."""
    chunks: int = 0
    """Non-final chunks run so far."""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    last_advanced: int = -1

    @property
    def input_done(self) -> bool:
        req = self.request
        if not req.streaming:
            return self.offline_audio is None
        return req.input_finished and req.pending_samples == 0

    def has_pending_audio(self) -> bool:
        return self.offline_audio is not None or self.request.pending_samples > 0

    def take_audio(self) -> np.ndarray:
        if self.offline_audio is not None:
            audio, self.offline_audio = self.offline_audio, None
            return audio
        return self.request.take_pending_audio()
