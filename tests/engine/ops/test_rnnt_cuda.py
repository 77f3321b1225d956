"""RNN-T / TDT label loop on a GPU: the CUDA bookkeeping with ATen's CUDA joint and LSTM against
the CPU kernel (same tokens and frames; log-probs and states to float32 rounding of the GPU's
GEMMs). Skips without a GPU or CUDA kernels."""

from __future__ import annotations

import pytest
import torch

from engine.ops import TransducerDecodeState, TransducerWeights, rnnt_greedy_label_loop


def on(w: TransducerWeights, device: str) -> TransducerWeights:
    return TransducerWeights(
        w.embed.to(device), tuple(t.to(device) for t in w.lstm), w.pred_weight.to(device), w.pred_bias.to(device),
        w.enc_weight.to(device), w.enc_bias.to(device), w.out_weight.to(device), w.out_bias.to(device),
        w.activation, w.durations.to(device),
    )  # fmt: skip


@pytest.mark.parametrize("durations", [(), (0, 1, 2, 3, 4)])
def test_cuda_equals_cpu(cuda_ext: None, durations: tuple[int, ...]) -> None:
    w = TransducerWeights.random(durations=durations, layers=2, seed=7)
    g = torch.Generator().manual_seed(7)
    enc = torch.randn(32, 40, 40, generator=g)
    lengths = torch.randint(0, 41, (32,), generator=g)
    cpu, cpu_state = rnnt_greedy_label_loop(w.project(enc), lengths, w.initial_state(32), w, 5, use_extension=True)
    wg = on(w, "cuda")
    state = TransducerDecodeState(*(t.cuda() for t in vars(w.initial_state(32)).values()))
    gpu, gpu_state = rnnt_greedy_label_loop(wg.project(enc.cuda()), lengths.cuda(), state, wg, 5, use_extension=True)
    assert torch.equal(gpu.counts.cpu(), cpu.counts)
    for row in range(32):
        tokens, frames, logprobs = gpu.row(row)
        assert (tokens, frames) == cpu.row(row)[:2], row
        assert logprobs == pytest.approx(cpu.row(row)[2], abs=1e-4)
    torch.testing.assert_close(gpu_state.h.cpu(), cpu_state.h, atol=1e-4, rtol=1e-4)
    assert torch.equal(gpu_state.time_jump.cpu(), cpu_state.time_jump)
