"""NeMo's batched beam search (engine/ops/malsd.py) on generated transducers: what batching,
chunking and beam width must not change. Parity with NeMo itself is tests/engine/nemo/test_nemo_beam.py."""

from __future__ import annotations

import pytest
import torch

from engine.models.nemo.beam import NemoTransducerNet
from engine.ops import TransducerWeights, rnnt_greedy_label_loop_reference
from engine.ops.context_graph import ContextGraph
from engine.ops.malsd import MalsdBeam, malsd_search

ENC_HIDDEN = 40


def _net(seed: int = 0, blank_bias: float = 2.0) -> NemoTransducerNet:
    return NemoTransducerNet(TransducerWeights.random(vocab=24, enc_hidden=ENC_HIDDEN, seed=seed, blank_bias=blank_bias))


def _frames(batch: int, frames: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, frames, ENC_HIDDEN, generator=torch.Generator().manual_seed(seed)) * 3


def _search(net: NemoTransducerNet, enc: torch.Tensor, lengths: list[int], beam: int,
            graphs: list[ContextGraph | None] | None = None) -> list[MalsdBeam]:  # fmt: skip
    beams = [MalsdBeam.initial(net, beam, g) for g in (graphs or [None] * len(lengths))]
    malsd_search(net, net.project(enc), torch.tensor(lengths), beams, max_symbols=3)
    return beams


def _nbest(beam: MalsdBeam) -> list[tuple[list[int], list[int]]]:
    return [(h.tokens, h.frames) for h in beam.hypotheses(final=True)]


@torch.inference_mode()
def test_rows_of_a_batch_decode_as_they_do_alone() -> None:
    net = _net()
    enc = _frames(3, 20)
    lengths = [20, 9, 14]
    together = _search(net, enc, lengths, beam=4)
    for i, n in enumerate(lengths):
        alone = _search(net, enc[i : i + 1, :n], [n], beam=4)[0]
        assert _nbest(together[i]) == _nbest(alone)
        assert together[i].scores.tolist() == pytest.approx(alone.scores.tolist(), abs=1e-5)
    assert len({str(_nbest(b)) for b in together}) == 3, "the rows differ: the test can fail"


@torch.inference_mode()
def test_a_row_without_frames_stays_as_it_was() -> None:
    net = _net()
    beams = _search(net, _frames(2, 10), [10, 0], beam=3)
    assert _nbest(beams[1]) == [([], [])]
    assert beams[1].frames_decoded == 0 and beams[0].frames_decoded == 10


@torch.inference_mode()
def test_beam_one_is_greedy_search() -> None:
    """One hypothesis, no merging: the label loop NeMo's greedy decoder runs (same max_symbols)."""
    weights = TransducerWeights.random(vocab=24, enc_hidden=ENC_HIDDEN, seed=3, blank_bias=1.0)
    net = NemoTransducerNet(weights)
    enc = _frames(1, 30, seed=4)
    greedy, _ = rnnt_greedy_label_loop_reference(weights.project(enc), torch.tensor([30]), weights.initial_state(1),
                                                weights, max_symbols=3)  # fmt: skip
    tokens, frames, _ = greedy.row(0)
    assert len(tokens) > 5
    assert _nbest(_search(net, enc, [30], beam=1)[0]) == [(tokens, frames)]


@torch.inference_mode()
def test_chunks_carry_the_beam() -> None:
    """A stream decoded chunk by chunk keeps absolute frames, and its first chunk equals an
    utterance of that length."""
    net = _net(seed=5)
    enc = _frames(1, 24, seed=6)
    stream = MalsdBeam.initial(net, 4)
    for start in range(0, 24, 8):
        malsd_search(net, net.project(enc[:, start : start + 8]), torch.tensor([8]), [stream], max_symbols=3)
        if start == 0:
            assert _nbest(stream) == _nbest(_search(net, enc[:, :8], [8], beam=4)[0])
    best = stream.hypotheses(final=True)[0]
    assert stream.frames_decoded == 24 and best.frames == sorted(best.frames) and max(best.frames) >= 8
    assert stream.stable_tokens() == best.tokens[: len(stream.stable_tokens())]


@torch.inference_mode()
def test_keywords_pull_their_tokens_into_the_best_hypothesis() -> None:
    net = _net(seed=7)
    enc = _frames(1, 25, seed=8)
    plain = _search(net, enc, [25], beam=8)[0].hypotheses(final=True)
    best = plain[0].tokens
    bigrams = {tuple(best[j : j + 2]) for j in range(len(best) - 1)}
    keyword = next(list(h.tokens[i : i + 2]) for h in plain[1:] for i in range(len(h.tokens) - 1)
                   if tuple(h.tokens[i : i + 2]) not in bigrams)  # fmt: skip
    graph = ContextGraph.from_keywords([keyword], boost=4.0)
    biased = _search(net, enc, [25], beam=8, graphs=[graph])[0].hypotheses(final=True)[0]
    assert any(biased.tokens[j : j + 2] == keyword for j in range(len(biased.tokens) - 1))
    assert biased.bonus == pytest.approx(4.0 * 2 * sum(
        1 for j in range(len(biased.tokens) - 1) if biased.tokens[j : j + 2] == keyword), abs=1e-4)  # fmt: skip


@torch.inference_mode()
def test_tdt_rows_batch_as_alone_and_durations_carry_across_chunks() -> None:
    """TDT: durations move hypotheses on by several frames; a jump past a chunk's end is carried."""
    weights = TransducerWeights.random(vocab=24, enc_hidden=ENC_HIDDEN, seed=9, blank_bias=1.0, durations=(0, 1, 2, 3))
    net = NemoTransducerNet(weights)
    enc = _frames(2, 21, seed=10)
    durations = net.durations
    together = [MalsdBeam.initial(net, 4, tdt=True) for _ in range(2)]
    malsd_search(net, net.project(enc), torch.tensor([21, 13]), together, max_symbols=3, durations=durations)
    for i, n in enumerate((21, 13)):
        alone = MalsdBeam.initial(net, 4, tdt=True)
        malsd_search(net, net.project(enc[i : i + 1, :n]), torch.tensor([n]), [alone], max_symbols=3, durations=durations)
        assert _nbest(together[i]) == _nbest(alone)
    stream = MalsdBeam.initial(net, 4, tdt=True)
    jumped = False
    for start in range(0, 21, 5):
        chunk = enc[:, start : start + 5]
        malsd_search(net, net.project(chunk), torch.tensor([chunk.shape[1]]), [stream], max_symbols=3,
                     durations=durations)  # fmt: skip
        assert stream.time_jump is not None
        jumped |= bool((stream.time_jump > 0).any())
    best = stream.hypotheses(final=True)[0]
    assert jumped and len(best.tokens) > 3 and best.frames == sorted(best.frames) and max(best.frames) < 21
