"""CTC prefix beam search on a GPU: the CUDA kernel against the CPU kernel (tokens and alignments
identical, scores to 1e-9 relative: the GPU's exp/log1p may differ from glibc's in the last bits).
Skips without a GPU or without CUDA kernels."""

from __future__ import annotations

import math

import pytest
import torch

from engine.ops import BeamState, ContextTrie, ctc_prefix_beam_search

SCORE_RTOL = 1e-9


def run(lp: torch.Tensor, lengths: torch.Tensor, device: str, tries: list[ContextTrie | None] | None = None,
        state: BeamState | None = None, beam: int = 8) -> BeamState:  # fmt: skip
    state = state or BeamState.initial(lp.shape[0])
    state = BeamState(*(t.to(device) for t in state.tensors()))
    out = ctc_prefix_beam_search(lp.to(device), lengths.to(device), state, beam=beam, blank=0,
                                 frame_offset=torch.zeros_like(lengths).to(device), tries=tries,
                                 use_extension=True)  # fmt: skip
    return BeamState(*(t.cpu() for t in out.tensors()))


def assert_close_states(gpu: BeamState, cpu: BeamState) -> None:
    assert gpu.num_hyps.tolist() == cpu.num_hyps.tolist()
    for row in range(cpu.batch):
        a, b = gpu.hypotheses(row), cpu.hypotheses(row)
        assert [(h.tokens, h.frames, h.token_logprobs, h.context_node) for h in a] == [
            (h.tokens, h.frames, h.token_logprobs, h.context_node) for h in b
        ], row
        for x, y in zip(a, b, strict=True):
            for u, w in ((x.p_blank, y.p_blank), (x.p_nonblank, y.p_nonblank), (x.context_score, y.context_score)):
                assert u == w or math.isclose(u, w, rel_tol=SCORE_RTOL), (row, u, w)


@pytest.mark.parametrize(("batch", "frames", "vocab", "beam"), [(1, 40, 7, 4), (64, 30, 5000, 10), (9, 60, 300, 1)])
def test_cuda_equals_cpu(cuda_ext: None, batch: int, frames: int, vocab: int, beam: int) -> None:
    g = torch.Generator().manual_seed(batch)
    lp = torch.log_softmax(torch.randn(batch, frames, vocab, generator=g) * 3, dim=-1)
    lengths = torch.randint(0, frames + 1, (batch,), generator=g)
    lengths[0] = frames
    assert_close_states(run(lp, lengths, "cuda", beam=beam), run(lp, lengths, "cpu", beam=beam))


def test_cuda_biasing_and_streaming_equal_cpu(cuda_ext: None) -> None:
    g = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(4, 50, 20, generator=g) * 2, dim=-1)
    lengths = torch.tensor([50, 10, 0, 37])
    tries = [ContextTrie.from_keywords([[1, 2, 3], [4, 5]], boost=2.0), None, ContextTrie.empty(),
             ContextTrie.from_keywords([[7]], boost=1.5)]  # fmt: skip
    gpu, cpu = BeamState.initial(4), BeamState.initial(4)
    for start in (0, 25):
        piece, left = lp[:, start : start + 25].contiguous(), (lengths - start).clamp(0, 25)
        gpu, cpu = run(piece, left, "cuda", tries, gpu), run(piece, left, "cpu", tries, cpu)
        assert_close_states(gpu, cpu)


def test_cuda_rejects_bad_arguments(cuda_ext: None) -> None:
    lp = torch.zeros(2, 3, 4, device="cuda")
    state = BeamState.initial(2)
    with pytest.raises(RuntimeError, match="lengths holds 9"):
        ctc_prefix_beam_search(lp, torch.full((2,), 9, device="cuda"), BeamState(*(t.cuda() for t in state.tensors())),
                               beam=2, blank=0, use_extension=True)  # fmt: skip
    with pytest.raises(RuntimeError, match=r"expected cuda|same device"):
        ctc_prefix_beam_search(lp, torch.full((2,), 3), BeamState(*(t.cuda() for t in state.tensors())), beam=2,
                               blank=0, use_extension=True)  # fmt: skip
