"""CTC decoding: prefix beam search against brute force, streaming state across chunks,
detokenization and word timings."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from engine.ctc_prefix import BLANK_ID, CTCState
from engine.models.wenet.ctc import Detokenizer
from engine.models.wenet.testing import units_list


def random_log_probs(t: int, v: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(t, v, generator=g) * 2, dim=-1)


def collapse(path: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    prev = None
    for s in path:
        if s != BLANK_ID and s != prev:
            out.append(s)
        prev = s
    return tuple(out)


def brute_force(log_probs: torch.Tensor) -> dict[tuple[int, ...], float]:
    """log P(prefix) summed over every alignment."""
    t, v = log_probs.shape
    totals: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(v), repeat=t):
        lp = sum(float(log_probs[i, s]) for i, s in enumerate(path))
        key = collapse(path)
        totals[key] = float(torch.logaddexp(torch.tensor(totals.get(key, -math.inf)), torch.tensor(lp)))
    return totals


@pytest.mark.parametrize("seed", range(4))
def test_prefix_beam_search_finds_the_most_likely_labelling(seed: int) -> None:
    lp = random_log_probs(5, 3, seed)
    exact = brute_force(lp)
    state = CTCState(beam_size=10)
    state.advance(lp)
    best = state.best()
    assert best.tokens == max(exact, key=exact.__getitem__)
    assert best.score == pytest.approx(exact[best.tokens], abs=1e-5)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_state_carries_across_chunks(beam_size: int) -> None:
    lp = random_log_probs(40, 8, 7)
    whole = CTCState(beam_size)
    whole.advance(lp)
    pieces = CTCState(beam_size)
    for part in torch.split(lp, [3, 1, 16, 7, 13]):
        pieces.advance(part)
    assert [h.tokens for h in pieces.beams] == [h.tokens for h in whole.beams]
    assert pieces.best().frames == whole.best().frames
    assert pieces.best().score == pytest.approx(whole.best().score, abs=1e-5)


def test_greedy_collapses_repeats_and_blanks_across_chunk_edges() -> None:
    ids = [0, 3, 3, 0, 3, 5, 5, 5, 0, 0, 2]
    lp = torch.full((len(ids), 6), -10.0)
    lp[torch.arange(len(ids)), torch.tensor(ids)] = -0.01
    state = CTCState(1)
    for part in torch.split(lp, [2, 4, 5]):  # edges inside the 3-3 and 5-5-5 runs
        state.advance(part)
    assert state.best().tokens == (3, 3, 5, 2)
    assert state.best().frames == (1, 4, 5, 10)


def test_stable_prefix_only_grows() -> None:
    lp = random_log_probs(60, 6, 3)
    state = CTCState(4)
    prev: tuple[int, ...] = ()
    for part in torch.split(lp, 4):
        state.advance(part)
        stable = state.stable_tokens()
        assert stable[: len(prev)] == prev
        assert all(h.tokens[: len(stable)] == stable for h in state.beams)
        prev = stable


def test_sentencepiece_text_and_word_timings() -> None:
    units = units_list()
    detok = Detokenizer(units)
    idx = {u: i for i, u in enumerate(units)}
    tokens = ["▁H", "E", "▁S", "A", "I", "D", "<unk>"]
    lp = torch.full((20, len(units)), -9.0)
    frames = [2, 3, 8, 9, 11, 12, 15]
    for f, tok in zip(frames, tokens, strict=True):
        lp[f, idx[tok]] = -0.1
    lp[[i for i in range(20) if i not in frames], BLANK_ID] = -0.1
    state = CTCState(1)
    state.advance(lp)
    hyp = state.best()
    assert detok.text(hyp.tokens) == "HE SAID"
    words = detok.words(hyp, frame_seconds=0.04)
    assert [w.word for w in words] == ["HE", "SAID"]
    assert words[0].start == pytest.approx(0.08) and words[0].end == pytest.approx(0.16)
    assert words[1].start == pytest.approx(0.32) and words[1].end == pytest.approx(0.52)
    assert 0.85 < words[0].confidence <= 1.0


def test_character_units_make_one_word_per_cjk_character() -> None:
    units = ["<blank>", "<unk>", "你", "好", "▁OK", "<sos/eos>"]
    detok = Detokenizer(units)
    lp = torch.full((8, len(units)), -9.0)
    for f, tok in zip([1, 3, 5], [2, 3, 4], strict=True):
        lp[f, tok] = -0.05
    lp[[0, 2, 4, 6, 7], BLANK_ID] = -0.05
    state = CTCState(1)
    state.advance(lp)
    hyp = state.best()
    assert detok.text(hyp.tokens) == "你好 OK"
    assert [w.word for w in detok.words(hyp, 0.04)] == ["你", "好", "OK"]
