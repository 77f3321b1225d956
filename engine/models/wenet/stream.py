"""A WeNet request's per-stream state between engine steps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.cache import BlockTable
from engine.ctc_prefix import CTCState
from engine.request import Request


@dataclass(eq=False)
class WenetStream:
    """One request's state in the runner: its KV blocks, conv caches, CTC search and unconsumed input."""

    request: Request
    table: BlockTable
    cnn_cache: torch.Tensor
    """(layers, D, lorder): the last conv inputs of every layer."""
    ctc: CTCState
    wave_tail: torch.Tensor
    """Scaled samples not yet covered by a whole fbank frame."""
    feats: torch.Tensor
    """(n, F) normalized features not yet consumed; the next window starts at row 0."""
    offline_audio: np.ndarray | None = None
    last_advanced: int = -1
    hit_ceiling: bool = False
    encoder_out: list[torch.Tensor] | None = None
    """Encoder output chunks, kept only when the final n-best will be attention-rescored."""

    @property
    def input_done(self) -> bool:
        req = self.request
        if not req.streaming:
            return self.offline_audio is None
        return req.input_finished and req.pending_samples == 0

    def has_pending_audio(self) -> bool:
        return self.offline_audio is not None or self.request.pending_samples > 0
