"""icefall's modified beam search (engine/ops/modified_beam.py) on a generated transducer: what
batching, chunking and beam width must not change. Parity with icefall itself runs on the
Zipformer fixtures (tests/engine/zipformer)."""

from __future__ import annotations

import torch

from engine.models.nemo.beam import NemoTransducerNet
from engine.ops import TransducerWeights
from engine.ops.context_graph import ContextGraph
from engine.ops.modified_beam import ModifiedBeam, modified_beam_search

ENC_HIDDEN = 40
CONTEXT = 2
"""Length-normalisation offset (icefall's context_size)."""


def _net(seed: int = 0, blank_bias: float = 2.0) -> NemoTransducerNet:
    return NemoTransducerNet(TransducerWeights.random(vocab=24, enc_hidden=ENC_HIDDEN, seed=seed, blank_bias=blank_bias))


def _frames(batch: int, frames: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, frames, ENC_HIDDEN, generator=torch.Generator().manual_seed(seed)) * 3


def _search(net: NemoTransducerNet, enc: torch.Tensor, lengths: list[int], beam: int,
            graph: ContextGraph | None = None) -> list[ModifiedBeam]:  # fmt: skip
    beams = [ModifiedBeam.initial(net, beam, CONTEXT, graph) for _ in lengths]
    modified_beam_search(net, net.project(enc), lengths, beams)
    return beams


def _nbest(beam: ModifiedBeam) -> list[tuple[list[int], list[int]]]:
    return [(h.tokens, h.frames) for h in beam.hypotheses(final=True)]


def test_rows_of_a_batch_decode_as_they_do_alone() -> None:
    net = _net()
    enc = _frames(3, 20)
    lengths = [20, 9, 14]
    together = _search(net, enc, lengths, beam=4)
    for i, n in enumerate(lengths):
        alone = _search(net, enc[i : i + 1, :n], [n], beam=4)[0]
        assert _nbest(together[i]) == _nbest(alone)
    assert len({str(_nbest(b)) for b in together}) == 3


def test_beam_one_is_one_symbol_greedy_search() -> None:
    """icefall's greedy_search with max_sym_per_frame=1: argmax per frame, the predictor advanced on a token."""
    net = _net(seed=3, blank_bias=1.0)
    enc = net.project(_frames(1, 30, seed=4))
    state, tokens, frames = net.start(1), [], []
    for t in range(30):
        tok = int(net.log_probs(enc[:, t], state).argmax(-1))
        if tok != net.blank:
            tokens.append(tok)
            frames.append(t)
            state = net.step(torch.tensor([tok]), state)
    assert len(tokens) > 5
    beam = ModifiedBeam.initial(net, 1, CONTEXT)
    modified_beam_search(net, enc, [30], [beam])
    assert _nbest(beam) == [(tokens, frames)]


def test_chunks_carry_the_set() -> None:
    """One symbol per frame and no cross-frame search: chunked decoding equals whole-utterance decoding."""
    net = _net(seed=5)
    enc = _frames(1, 24, seed=6)
    whole = _search(net, enc, [24], beam=4)[0]
    stream = ModifiedBeam.initial(net, 4, CONTEXT)
    for start in range(0, 24, 7):
        chunk = enc[:, start : start + 7]
        modified_beam_search(net, net.project(chunk), [chunk.shape[1]], [stream])
    assert _nbest(stream) == _nbest(whole) and stream.frames_decoded == 24
    assert len(_nbest(whole)) == 4


def test_keywords_pull_their_tokens_into_the_best_hypothesis() -> None:
    net = _net(seed=7)
    enc = _frames(1, 25, seed=8)
    plain = _search(net, enc, [25], beam=8)[0].hypotheses(final=True)
    best = plain[0].tokens
    bigrams = {tuple(best[j : j + 2]) for j in range(len(best) - 1)}
    keyword = next(list(h.tokens[i : i + 2]) for h in plain[1:] for i in range(len(h.tokens) - 1)
                   if tuple(h.tokens[i : i + 2]) not in bigrams)  # fmt: skip
    graph = ContextGraph.from_keywords([keyword], boost=4.0)
    biased = _search(net, enc, [25], beam=8, graph=graph)[0].hypotheses(final=True)[0]
    assert any(biased.tokens[j : j + 2] == keyword for j in range(len(biased.tokens) - 1))
    assert biased.bonus > 0
