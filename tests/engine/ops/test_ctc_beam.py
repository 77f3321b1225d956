"""CTC prefix beam search: the compiled kernel against the Python reference (tokens and
alignments identical, scores equal to double rounding), resumable chunk by chunk, batch 1..64
with ragged and empty rows, and bad arguments rejected with a RuntimeError."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from engine.ops import BeamState, ContextTrie, Hypothesis, ctc_prefix_beam_search
from engine.ops.ctc_beam import ctc_prefix_beam_search_reference

SCORE_RTOL = 1e-12
"""Both sides add and log-add the same float32 inputs in double in the same order; allow double
rounding in case a compiler contracts differently."""


def random_log_probs(b: int, t: int, v: int, seed: int, peaky: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(b, t, v, generator=g) * peaky, dim=-1)


def both(log_probs: torch.Tensor, lengths: torch.Tensor, **kw: object) -> tuple[BeamState, BeamState]:
    state = kw.pop("state", None) or BeamState.initial(log_probs.shape[0])
    ext = ctc_prefix_beam_search(log_probs, lengths, state, use_extension=True, **kw)  # type: ignore[arg-type]
    ref = ctc_prefix_beam_search(log_probs, lengths, state, use_extension=False, **kw)  # type: ignore[arg-type]
    return ext, ref


def assert_same(ext: BeamState, ref: BeamState) -> None:
    assert ext.num_hyps.tolist() == ref.num_hyps.tolist()
    for row in range(ext.batch):
        a, b = ext.hypotheses(row), ref.hypotheses(row)
        assert [h.tokens for h in a] == [h.tokens for h in b], row
        assert [h.frames for h in a] == [h.frames for h in b], row
        assert [h.token_logprobs for h in a] == [h.token_logprobs for h in b], row
        assert [h.context_node for h in a] == [h.context_node for h in b], row
        for x, y in zip(a, b, strict=True):
            for u, w in ((x.p_blank, y.p_blank), (x.p_nonblank, y.p_nonblank), (x.context_score, y.context_score)):
                assert u == w or math.isclose(u, w, rel_tol=SCORE_RTOL), (row, u, w)


@pytest.mark.parametrize(
    ("batch", "frames", "vocab", "beam"),
    [(1, 30, 6, 4), (7, 50, 40, 10), (64, 12, 30, 3), (5, 20, 3, 10), (3, 25, 200, 1)],
)
def test_kernel_equals_reference_on_random_ragged_batches(ext: None, two_threads: None, batch: int, frames: int,
                                                          vocab: int, beam: int) -> None:  # fmt: skip
    lp = random_log_probs(batch, frames, vocab, seed=batch + vocab)
    lengths = torch.randint(0, frames + 1, (batch,), generator=torch.Generator().manual_seed(batch))
    lengths[0] = frames  # one full row, and (for batch > 1) some short or empty ones
    offsets = torch.randint(0, 1000, (batch,), generator=torch.Generator().manual_seed(1))
    got, want = both(lp, lengths, beam=beam, blank=0, frame_offset=offsets)
    assert_same(got, want)
    assert got.tokens.shape[1] == beam


def test_rows_do_not_depend_on_their_batch(ext: None) -> None:
    lp = random_log_probs(9, 40, 25, seed=3)
    lengths = torch.tensor([40, 3, 0, 40, 17, 1, 40, 22, 39])
    batched = ctc_prefix_beam_search(lp, lengths, BeamState.initial(9), beam=6, blank=0, use_extension=True)
    for row in (0, 4, 8):
        alone = ctc_prefix_beam_search(lp[row : row + 1], lengths[row : row + 1], BeamState.initial(1), beam=6,
                                       blank=0, use_extension=True)  # fmt: skip
        assert alone.hypotheses(0) == batched.hypotheses(row)


@pytest.mark.parametrize("use_extension", [True, False])
def test_chunk_by_chunk_equals_one_call(ext: None, use_extension: bool) -> None:
    lp = random_log_probs(4, 60, 12, seed=9)
    lengths = torch.tensor([60, 45, 60, 7])
    whole = ctc_prefix_beam_search(lp, lengths, BeamState.initial(4), beam=5, blank=0, use_extension=use_extension)
    state, start = BeamState.initial(4), 0
    for size in (1, 16, 3, 24, 16):
        piece = lp[:, start : start + size]
        left = (lengths - start).clamp(0, size)
        state = ctc_prefix_beam_search(piece, left, state, beam=5, blank=0, frame_offset=torch.full((4,), start),
                                       use_extension=use_extension)  # fmt: skip
        start += size
    for row in range(4):
        assert state.hypotheses(row) == whole.hypotheses(row)


def test_blank_anywhere_and_peaky_real_like_posteriors(ext: None) -> None:
    lp = random_log_probs(6, 80, 50, seed=4, peaky=6.0)  # near one-hot frames, as a trained model gives
    got, want = both(lp, torch.full((6,), 80), beam=8, blank=49)
    assert_same(got, want)


def test_model_posteriors_on_real_speech(ext: None, wenet_log_probs: torch.Tensor) -> None:
    lp = wenet_log_probs.unsqueeze(0).repeat(3, 1, 1)
    lengths = torch.tensor([lp.shape[1], lp.shape[1] // 2, 5])
    got, want = both(lp.contiguous(), lengths, beam=10, blank=0)
    assert_same(got, want)
    assert got.hypotheses(0)[0].tokens  # the tiny model emits tokens on speech


def test_best_hypothesis_is_the_most_likely_labelling(ext: None) -> None:
    for seed in range(3):
        lp = random_log_probs(1, 5, 3, seed)
        exact: dict[tuple[int, ...], float] = {}
        for path in itertools.product(range(3), repeat=5):
            labels = tuple(s for i, s in enumerate(path) if s != 0 and (i == 0 or s != path[i - 1]))
            p = sum(float(lp[0, i, s]) for i, s in enumerate(path))
            exact[labels] = float(torch.logaddexp(torch.tensor(exact.get(labels, -math.inf)), torch.tensor(p)))
        got = ctc_prefix_beam_search(lp, torch.tensor([5]), BeamState.initial(1), beam=10, blank=0,
                                     use_extension=True).hypotheses(0)[0]  # fmt: skip
        assert got.tokens == max(exact, key=exact.__getitem__)
        assert got.score == pytest.approx(exact[got.tokens], abs=1e-5)


def test_empty_inputs(ext: None) -> None:
    for b, t in ((0, 10), (3, 0)):
        lp = random_log_probs(b, t, 7, seed=0)
        got, want = both(lp, torch.zeros(b, dtype=torch.long), beam=4, blank=0)
        assert_same(got, want)
        assert got.batch == b and all(h == [Hypothesis()] for h in (got.hypotheses(r) for r in range(b)))


def keyword_log_probs() -> torch.Tensor:
    """Frames where unit 3 narrowly beats unit 4 after unit 2: without help the search says 2 3."""
    lp = torch.full((1, 6, 6), -12.0)
    lp[0, 0, 2] = math.log(0.9)
    lp[0, 1, 0] = math.log(0.9)
    lp[0, 2, 3], lp[0, 2, 4] = math.log(0.55), math.log(0.44)
    lp[0, 3:, 0] = math.log(0.95)
    return torch.log_softmax(lp, dim=-1)


@pytest.mark.parametrize("use_extension", [True, False])
def test_a_keyword_wins_over_a_slightly_more_likely_sequence(ext: None, use_extension: bool) -> None:
    lp, lengths = keyword_log_probs(), torch.tensor([6])
    plain = ctc_prefix_beam_search(lp, lengths, BeamState.initial(1), beam=4, blank=0, use_extension=use_extension)
    assert plain.hypotheses(0)[0].tokens == (2, 3)
    trie = ContextTrie.from_keywords([[2, 4]], boost=0.5)
    biased = ctc_prefix_beam_search(lp, lengths, BeamState.initial(1), beam=4, blank=0, tries=[trie],
                                    use_extension=use_extension).hypotheses(0)  # fmt: skip
    assert biased[0].tokens == (2, 4)
    assert biased[0].context_score == pytest.approx(1.0)  # two keyword tokens, 0.5 each
    # the acoustic score is untouched: the keyword path is still less likely acoustically
    assert biased[0].score < next(h.score for h in biased if h.tokens == (2, 3))


def test_an_unfinished_keyword_gives_its_bonus_back(ext: None) -> None:
    trie = ContextTrie.from_keywords([[2, 5, 1]], boost=2.0)
    lp, lengths = keyword_log_probs(), torch.tensor([6])
    got, want = both(lp, lengths, beam=4, blank=0, tries=[trie])
    assert_same(got, want)
    hyps = got.hypotheses(0)
    assert any(h.tokens[:2] == (2, 3) for h in hyps)
    for h in hyps:  # '2' then not '5': the 2.0 earned on '2' is taken back; a final '2' starts over
        assert h.context_score == (2.0 if h.tokens[-1:] == (2,) else 0.0), h
        assert h.context_score == trie.pending(h.context_node)


@pytest.mark.parametrize("use_extension", [True, False])
def test_an_empty_trie_equals_no_trie_bit_for_bit(ext: None, use_extension: bool) -> None:
    lp = random_log_probs(5, 40, 20, seed=2)
    lengths = torch.tensor([40, 31, 0, 40, 9])
    plain = ctc_prefix_beam_search(lp, lengths, BeamState.initial(5), beam=6, blank=0, use_extension=use_extension)
    empty = ctc_prefix_beam_search(lp, lengths, BeamState.initial(5), beam=6, blank=0,
                                   tries=[ContextTrie.empty()] * 5, use_extension=use_extension)  # fmt: skip
    for a, b in zip(plain.tensors(), empty.tensors(), strict=True):
        assert torch.equal(a, b)


def test_per_row_tries_match_the_reference(ext: None) -> None:
    lp = random_log_probs(6, 50, 15, seed=11)
    lengths = torch.tensor([50, 50, 20, 0, 50, 33])
    g = torch.Generator().manual_seed(5)
    tries: list[ContextTrie | None] = []
    for row in range(6):
        if row == 1:
            tries.append(None)
            continue
        words = [torch.randint(1, 15, (int(n),), generator=g).tolist() for n in torch.randint(1, 4, (4,), generator=g)]
        tries.append(ContextTrie.from_keywords(words, boost=[1.0, 2.5, 0.7, 4.0]))
    tries[5] = tries[0]  # a trie shared by two rows
    state = BeamState.initial(6)
    for start in (0, 25):  # across two chunks: trie nodes carry over
        piece = lp[:, start : start + 25]
        left = (lengths - start).clamp(0, 25)
        got, want = both(piece, left, state=state, beam=7, blank=0, tries=tries,
                         frame_offset=torch.full((6,), start))  # fmt: skip
        assert_same(got, want)
        state = got
    assert any(h.context_score != 0 for r in range(6) for h in got.hypotheses(r))


def test_trie_walk_restarts_and_completes() -> None:
    trie = ContextTrie.from_keywords([[1, 2, 3], [1, 2], [7]], boost=[1.0, 3.0, 2.0])
    node, total = 0, 0.0
    for tok in (1, 2):
        node, delta = trie.step(node, tok)
        total += delta
    assert total == 6.0 and trie.pending(node) == 0.0  # [1, 2] is complete (boost 3 wins the shared edges)
    node, delta = trie.step(node, 9)  # leaves the longer keyword: nothing to give back
    assert (node, delta) == (0, 0.0)
    node, delta = trie.step(0, 7)  # a one-token keyword: back at the root, bonus kept
    assert (node, delta) == (0, 2.0)
    node, _ = trie.step(0, 1)
    node, delta = trie.step(node, 7)  # breaks '1' (3.0 unearned), then matches '7'
    assert (node, delta) == (0, -3.0 + 2.0)


def _args(b: int = 2, t: int = 5, v: int = 6) -> dict[str, object]:
    lp = random_log_probs(b, t, v, seed=0)
    state = BeamState.initial(b)
    names = ("num_hyps", "hyp_tokens", "hyp_frames", "hyp_token_logprobs", "hyp_lengths", "hyp_scores", "hyp_context")
    trie = ContextTrie.from_keywords([[1, 2]])
    return {
        "log_probs": lp, "lengths": torch.full((b,), t), "frame_offset": torch.zeros(b, dtype=torch.long),
        **dict(zip(names, state.tensors(), strict=True)), "beam": 4, "blank": 0,
        "trie_nodes": trie.nodes, "trie_edges": trie.edges, "trie_scores": trie.scores,
        "trie_roots": torch.zeros(b, dtype=torch.long),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"log_probs": random_log_probs(2, 5, 6, 0).double()}, "log_probs must be Float"),
        ({"log_probs": torch.zeros(2, 5)}, r"log_probs must be \(batch, frames, vocab\)"),
        ({"lengths": torch.full((2,), 6)}, "lengths holds 6"),
        ({"lengths": torch.full((3,), 5)}, "lengths has shape"),
        ({"lengths": torch.full((2,), 5, dtype=torch.int32)}, "lengths must be Long"),
        ({"blank": 6}, "blank must be a unit id"),
        ({"beam": 0}, "beam must be >= 1"),
        ({"num_hyps": torch.full((2,), 2)}, "num_hyps holds 2"),
        ({"hyp_lengths": torch.ones(2, 1, dtype=torch.long)}, "hyp_lengths holds 1"),
        ({"hyp_scores": torch.zeros(2, 1, 3)}, "hyp_scores must be Double"),
        ({"trie_roots": None}, "come together"),
        ({"trie_roots": torch.full((2,), 9)}, "is not a node"),
        ({"hyp_context": torch.full((2, 1), 5)}, "is not a node of row"),
        ({"trie_nodes": torch.tensor([[0, 2], [1, 1], [2, 0]]), "trie_edges": torch.tensor([[2, 1], [1, 2]])},
         "not sorted by token"),
        ({"trie_nodes": torch.tensor([[0, 1], [1, 5], [2, 0]])}, r"names edges \[1, 6\)"),
        ({"trie_edges": torch.tensor([[1, 40], [2, 2]])}, "leads to node 40"),
    ],
)
def test_bad_arguments_raise_runtime_errors(ext: None, change: dict[str, object], message: str) -> None:
    args = {**_args(), **change}
    with pytest.raises(RuntimeError, match=message):
        torch.ops.oasr.ctc_prefix_beam_search(**args)


def test_schema_and_fake_implementation(ext: None) -> None:
    args = _args()
    torch.library.opcheck(torch.ops.oasr.ctc_prefix_beam_search.default, (), args,
                          test_utils=("test_schema", "test_faketensor"))  # fmt: skip


def test_reference_is_callable_like_the_operator() -> None:
    out = ctc_prefix_beam_search_reference(**_args())  # type: ignore[arg-type]
    assert len(out) == 7 and out[1].shape == (2, 4, 5)
