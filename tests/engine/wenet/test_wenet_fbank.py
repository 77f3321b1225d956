"""engine.fbank against kaldi-native-fbank on the real 16 kHz clips of the dev set."""

from __future__ import annotations

import json

import kaldi_native_fbank as knf
import numpy as np
import pytest
import soundfile as sf
import torch

from engine.fbank import FbankOptions, KaldiFbank, frames_for
from tests.conftest import DATA_DIR, MANIFEST

AUDIO_SCALE = 32768.0


def native_16k_clips() -> list[str]:
    if not MANIFEST.exists():
        return []
    rows = [json.loads(line) for line in MANIFEST.read_text().splitlines() if line.strip()]
    return [r["audio"] for r in rows if r.get("sample_rate") == 16000]


def knf_fbank(wave: np.ndarray) -> np.ndarray:
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = True
    opts.mel_opts.num_bins = 80
    opts.energy_floor = 0.0
    fb = knf.OnlineFbank(opts)
    fb.accept_waveform(16000, wave.tolist())
    fb.input_finished()
    return np.stack([fb.get_frame(i) for i in range(fb.num_frames_ready)])


@pytest.mark.parametrize("name", native_16k_clips())
def test_matches_kaldi_native_fbank(name: str) -> None:
    wave = sf.read(DATA_DIR / name, dtype="float32", always_2d=True)[0][:, 0] * AUDIO_SCALE
    ref = knf_fbank(wave)
    got = KaldiFbank()([torch.from_numpy(wave)])[0].numpy()
    assert got.shape == ref.shape == (frames_for(len(wave), FbankOptions()), 80)
    assert np.abs(got - ref).max() <= 1e-3


def test_batch_of_mixed_lengths_equals_one_by_one() -> None:
    rng = np.random.default_rng(0)
    waves = [
        torch.from_numpy((rng.standard_normal(n) * 3000).astype(np.float32))
        for n in (0, 399, 400, 1234, 16000)
    ]
    fb = KaldiFbank()
    batched = fb(waves)
    for wave, feats in zip(waves, batched, strict=True):
        assert feats.shape == (frames_for(len(wave), fb.opts), 80)
        if len(feats):
            torch.testing.assert_close(feats, fb([wave])[0], rtol=0, atol=1e-4)  # matmul blocking differs


def test_frames_are_independent_of_how_audio_is_split() -> None:
    """What the runner relies on: frames of a prefix + frames of the uncovered tail == frames of all."""
    rng = np.random.default_rng(1)
    wave = torch.from_numpy((rng.standard_normal(8000) * 3000).astype(np.float32))
    fb = KaldiFbank()
    whole = fb([wave])[0]
    head = wave[:3001]
    used = frames_for(len(head), fb.opts) * fb.opts.window_shift
    parts = torch.cat([fb([head])[0], fb([wave[used:]])[0]])
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-4)
