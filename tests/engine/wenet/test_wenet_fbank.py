"""engine.fbank against kaldi-native-fbank on the real 16 kHz clips of the dev set.

Features are log energies, so two correct float32 implementations differ by the FFT's rounding
*relative to the frame's energy*, not to each bin's: a bin 17 nepers below the frame's loudest
differs by ~1e-3 in the log while the loud bins agree to 1e-6, and how much depends on the CPU's
FFT/GEMM kernels (AVX2 vs AVX-512, Intel vs AMD). `assert_fbank_close` therefore compares energies
with a tolerance derived from float32 rounding: `FFT_ROUNDING` eps of the frame's total energy
plus the rounding of the log itself.
"""

from __future__ import annotations

import json
import math

import kaldi_native_fbank as knf
import numpy as np
import pytest
import soundfile as sf
import torch

from engine.fbank import FbankOptions, frames_for
from engine.ops.fbank import KaldiFbank
from tests.conftest import DATA_DIR, MANIFEST

AUDIO_SCALE = 32768.0
FLT_EPSILON = float(np.finfo(np.float32).eps)
FFT_SIZE = 512  # the padded 25 ms window at 16 kHz
FFT_ROUNDING = 16 * math.log2(FFT_SIZE)
"""Rounding of a float32 radix-2 FFT's power spectrum, in eps of the frame's energy: one rounding
per stage (log2 N), doubled by squaring, x8 for two independent implementations and the
pre-emphasis/window/mel chain. 144; measured worst case on the dev clips: 27 (AMD, AVX-512)."""


def assert_fbank_close(got: np.ndarray | torch.Tensor, ref: np.ndarray | torch.Tensor) -> None:
    """log-mel frames (T, M) agree within float32 rounding of each frame's energy (see module doc)."""
    got64, ref64 = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert got64.shape == ref64.shape
    energy_got, energy_ref = np.exp(got64), np.exp(ref64)
    frame_energy = energy_ref.sum(axis=1, keepdims=True)
    tolerance = FFT_ROUNDING * FLT_EPSILON * frame_energy + 8 * FLT_EPSILON * energy_ref
    excess = np.abs(energy_got - energy_ref) / tolerance
    worst = np.unravel_index(int(excess.argmax()), excess.shape) if excess.size else None
    assert excess.size == 0 or excess.max() <= 1.0, (
        f"frame {worst}: log energy {got64[worst]:.6f} vs {ref64[worst]:.6f}, "
        f"{excess.max():.1f}x the float32 tolerance"
    )


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
    assert_fbank_close(got, ref)


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
            assert_fbank_close(feats, fb([wave])[0])  # matmul blocking differs with the batch


def test_frames_are_independent_of_how_audio_is_split() -> None:
    """What the runner relies on: frames of a prefix + frames of the uncovered tail == frames of all."""
    rng = np.random.default_rng(1)
    wave = torch.from_numpy((rng.standard_normal(8000) * 3000).astype(np.float32))
    fb = KaldiFbank()
    whole = fb([wave])[0]
    head = wave[:3001]
    used = frames_for(len(head), fb.opts) * fb.opts.window_shift
    parts = torch.cat([fb([head])[0], fb([wave[used:]])[0]])
    assert_fbank_close(parts, whole)
