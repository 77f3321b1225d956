"""A batch of windows is encoded in CPU-sized forwards (context.CPU_FRAMES_PER_FORWARD): the split
changes no encoding, on either numeric path."""

from __future__ import annotations

from typing import Any

import torch

from engine.models.whisper.context import CPU_FRAMES_PER_FORWARD, fit_frames
from engine.models.whisper.features import ENCODER_STRIDE


def test_a_batch_larger_than_one_forward_encodes_as_one_forward_would(engine_on_each_path: Any) -> None:
    runner = engine_on_each_path.runner
    context = runner.context_encoder
    length = fit_frames(700)
    count = CPU_FRAMES_PER_FORWARD // length + 2  # more than one forward's worth, and a remainder
    torch.manual_seed(0)
    mels = [torch.randn(runner.dims.n_mels, length) * 0.5 for _ in range(count)]
    mels.insert(2, torch.randn(runner.dims.n_mels, fit_frames(1200)) * 0.5)  # another length in between
    with torch.inference_mode():
        split = context.encode(mels)
        same = [m for m in mels if m.shape[1] == length]
        whole = runner.model.encoder(torch.stack(same), context.silence_after(same[0], length // ENCODER_STRIDE))
        alone = context.encode([mels[2]])[0]
    assert len(split) == len(mels) and all(f.shape == split[0].shape for f in split)
    feats = [f for f, m in zip(split, mels) if m.shape[1] == length]
    for k, f in enumerate(feats):
        assert torch.equal(f[: length // ENCODER_STRIDE], whole[k]), f"window {k} encoded differently when split"
    assert torch.equal(split[2], alone)
