"""Streaming noise reduction (app/audio/denoise.py): output is the input delayed, never shortened,
whatever the chunking, and noise between words is attenuated."""

from __future__ import annotations

import numpy as np

from app.audio.denoise import BLOCK_S, NoiseReducer


def _db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(x**2) + 1e-12))


def test_denoised_stream_keeps_every_sample_and_quiets_the_noise(clips: object) -> None:
    from tests.conftest import load_clip

    rng = np.random.default_rng(0)
    speech = load_clip("mfa_thoughts")
    silence = np.zeros(16000, np.float32)
    clean = np.concatenate([silence, speech])
    noisy = (clean + rng.standard_normal(clean.size).astype(np.float32) * 0.02).astype(np.float32)
    reducer = NoiseReducer("far_field", 1.0, 16000)
    out, held = [], []
    for i in range(0, noisy.size, 333):  # odd chunks, like a live client's
        out.append(reducer.process(noisy[i : i + 333]))
        held.append(reducer.held)
    out.append(reducer.flush())
    denoised = np.concatenate(out)
    assert denoised.size == noisy.size and reducer.held == 0
    assert max(held) < int(BLOCK_S * 16000) + 1024  # the delay: one block and its look-ahead
    speech_part = slice(16000, None)
    assert _db(denoised[speech_part] - clean[speech_part]) < _db(noisy[speech_part] - clean[speech_part]) - 2
