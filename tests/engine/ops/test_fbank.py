"""Kaldi fbank kernel: its per-frame arithmetic (shared with the CUDA kernel) run on CPU against
engine/fbank.py, for many streams of mixed length at once, within the float32 rounding bound
of tests/engine/wenet/test_wenet_fbank.py; bad arguments raise RuntimeError."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.fbank import FbankOptions, frames_for
from engine.ops.fbank import KaldiFbank, fft_twiddle, kaldi_fbank, kaldi_fbank_batched
from tests.conftest import load_clip
from tests.engine.wenet.test_wenet_fbank import AUDIO_SCALE, assert_fbank_close


def streams(count: int, seed: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    clip = load_clip("libri_61-70968-0000") * AUDIO_SCALE
    out = []
    for i in range(count):
        n = int(rng.integers(0, 9000)) if i % 4 else [0, 399, 400, 16000][i // 4 % 4]
        start = int(rng.integers(0, len(clip) - n))
        out.append(torch.from_numpy(np.ascontiguousarray(clip[start : start + n], dtype=np.float32)))
    return out


@pytest.mark.parametrize("count", [1, 9, 64])
def test_kernel_equals_torch_fbank(ext: None, two_threads: None, count: int) -> None:
    fb = KaldiFbank()
    waves = streams(count, seed=count)
    got = kaldi_fbank_batched(waves, fb._window, fb._banks, fb.opts, use_extension=True)
    want = fb(waves)
    assert len(got) == len(want) == count
    for wave, a, b in zip(waves, got, want, strict=True):
        assert a.shape == b.shape == (frames_for(len(wave), fb.opts), 80)
        if len(a):
            assert_fbank_close(a, b)


def test_other_rates_and_bin_counts(ext: None) -> None:
    opts = FbankOptions(sample_rate=8000, num_mel_bins=40, frame_length_ms=32.0)  # 256-sample window, P=256
    fb = KaldiFbank(opts)
    waves = [torch.randn(n) * 2000 for n in (256, 3000, 0)]
    got = kaldi_fbank_batched(waves, fb._window, fb._banks, opts, use_extension=True)
    for a, b in zip(got, fb(waves), strict=True):
        assert a.shape == b.shape
        if len(a):
            assert_fbank_close(a, b)


def test_no_frames(ext: None) -> None:
    fb = KaldiFbank()
    assert kaldi_fbank_batched([], fb._window, fb._banks, fb.opts, use_extension=True) == []
    out = kaldi_fbank_batched([torch.zeros(10), torch.zeros(0)], fb._window, fb._banks, fb.opts, use_extension=True)
    assert [o.shape for o in out] == [(0, 80), (0, 80)]


def test_silence_hits_the_log_floor(ext: None) -> None:
    fb = KaldiFbank()
    out = kaldi_fbank_batched([torch.zeros(800)], fb._window, fb._banks, fb.opts, use_extension=True)[0]
    assert torch.equal(out, torch.full_like(out, float(np.log(np.finfo(np.float32).eps))))


def args(**change: object) -> dict[str, object]:
    fb = KaldiFbank()
    base = {"waveform": torch.randn(1000), "frame_starts": torch.tensor([0, 160, 320]), "window": fb._window,
            "mel_banks": fb._banks, "twiddle": fft_twiddle(512), "preemph": 0.97}  # fmt: skip
    return {**base, **change}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"frame_starts": torch.tensor([0, 601])}, "frame_starts holds 601"),
        ({"frame_starts": torch.tensor([-1])}, "frame_starts holds -1"),
        ({"waveform": torch.randn(1000).double()}, "waveform must be Float"),
        ({"waveform": torch.randn(2, 500)}, "waveform must have 1 dimensions"),
        ({"twiddle": fft_twiddle(512)[:100]}, "power-of-two FFT size"),
        ({"twiddle": fft_twiddle(256)}, "power-of-two FFT size"),
        ({"mel_banks": torch.zeros(255, 80)}, "mel_banks has shape"),
        ({"preemph": float("inf")}, "preemph must be finite"),
    ],
)
def test_bad_arguments_raise_runtime_errors(ext: None, change: dict[str, object], message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        torch.ops.oasr.kaldi_fbank(**args(**change))


def test_entry_point_and_reference_agree(ext: None) -> None:
    a = args()
    assert_fbank_close(kaldi_fbank(**a, use_extension=True), kaldi_fbank(**a, use_extension=False))  # type: ignore[arg-type]


def test_schema_and_fake_implementation(ext: None) -> None:
    torch.library.opcheck(torch.ops.oasr.kaldi_fbank.default, (), args(), test_utils=("test_schema", "test_faketensor"))
