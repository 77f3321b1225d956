"""Kaldi fbank on a GPU: the CUDA kernel against the CPU kernel and engine/fbank.py's torch
path, and KaldiFbank on a CUDA device (which uses the kernel). Skips without a GPU or CUDA kernels."""

from __future__ import annotations

import torch

from engine.ops.fbank import KaldiFbank, kaldi_fbank_batched
from tests.engine.ops.test_fbank import streams
from tests.engine.wenet.test_wenet_fbank import assert_fbank_close


def test_cuda_equals_cpu_kernel_and_torch(cuda_ext: None) -> None:
    cpu_fb, gpu_fb = KaldiFbank(), KaldiFbank(device="cuda")
    waves = streams(64, seed=7)
    cpu = kaldi_fbank_batched(waves, cpu_fb._window, cpu_fb._banks, cpu_fb.opts, use_extension=True)
    gpu = kaldi_fbank_batched(waves, gpu_fb._window, gpu_fb._banks, gpu_fb.opts, use_extension=True)
    torch_cpu = cpu_fb(waves)
    for a, b, c in zip(gpu, cpu, torch_cpu, strict=True):
        assert a.is_cuda and a.shape == b.shape == c.shape
        if len(a):
            assert_fbank_close(a.cpu(), b)
            assert_fbank_close(a.cpu(), c)


def test_kaldi_fbank_on_cuda_runs_the_kernel(cuda_ext: None) -> None:
    fb = KaldiFbank(device="cuda")
    waves = streams(5, seed=3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fb(waves)
    assert any("oasr::kaldi_fbank" in e.name for e in prof.events())
    for a, b in zip(out, KaldiFbank()(waves), strict=True):
        if len(a):
            assert_fbank_close(a.cpu(), b)
