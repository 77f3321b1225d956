"""CTC decoding whose state carries across chunks: greedy, or the prefix beam search of
`engine.ops.ctc_prefix_beam_search` (compiled kernel, or its Python reference), run for every
beam-searching stream of an engine step in one call; per-request keywords bias it through a
token trie (engine/ops/context_biasing.py). Blank is id 0 (WeNet's units.txt; NeMo's CTC head
moves its blank there, engine/models/nemo/ctc.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import torch

from engine.ops import BeamState, ContextTrie, Hypothesis, ctc_prefix_beam_search

BLANK_ID = 0
"""The blank's id in the search (WeNet's units.txt puts <blank> at index 0)."""
NEG_INF = -float("inf")


class CTCState:
    """Per-stream decoding state, carried from chunk to chunk: greedy (beam_size 1) in Python,
    or a one-row `BeamState` of the prefix beam search."""

    def __init__(self, beam_size: int, trie: ContextTrie | None = None) -> None:
        self.beam_size = beam_size
        self.trie = trie
        """Keyword biasing for this stream (beam search only)."""
        self.frames = 0
        """Encoder frames decoded so far."""
        self.search = BeamState.initial(1) if beam_size > 1 else None
        self._ranked: list[Hypothesis] | None = None
        self._greedy = Hypothesis(p_blank=NEG_INF, p_nonblank=0.0)
        self.prev_token = BLANK_ID
        """Greedy: argmax of the previous frame (a repeat is not a new token)."""

    @property
    def beams(self) -> list[Hypothesis]:
        """Hypotheses, best first."""
        if self.search is None:
            return [self._greedy]
        if self._ranked is None:
            self._ranked = self.search.hypotheses(0)
        return self._ranked

    @beams.setter
    def beams(self, ranked: list[Hypothesis]) -> None:
        """Re-ranked hypotheses (attention rescoring, end of utterance); read until the next advance."""
        self._ranked = list(ranked)

    def advance(self, log_probs: torch.Tensor) -> None:
        """Consume one chunk's log-probs (T, V) (CPU float)."""
        advance_batch([self], log_probs.unsqueeze(0), [int(log_probs.shape[0])])

    def _advance_greedy(self, log_probs: torch.Tensor) -> None:
        best_lp, best = log_probs.max(dim=-1)
        hyp = self._greedy
        tokens, frames, lps = list(hyp.tokens), list(hyp.frames), list(hyp.token_logprobs)
        for t, (tok, lp) in enumerate(zip(best.tolist(), best_lp.tolist(), strict=True)):
            if tok != BLANK_ID and tok != self.prev_token:
                tokens.append(tok)
                frames.append(self.frames + t)
                lps.append(lp)
            self.prev_token = tok
        greedy_logprob = hyp.p_nonblank + float(best_lp.double().sum())
        self._greedy = Hypothesis(tuple(tokens), tuple(frames), tuple(lps), NEG_INF, greedy_logprob)

    def best(self) -> Hypothesis:
        if self.search is not None and self._ranked is None:
            return self.search.hypotheses(0, limit=1)[0]
        return self.beams[0]

    def stable_tokens(self) -> tuple[int, ...]:
        """Longest token prefix shared by every beam: every future beam extends one of the
        current ones, so this prefix can only grow."""
        if self.search is None or self._ranked is not None:
            return _common_prefix([h.tokens for h in self.beams])
        state = self.search
        count = int(state.num_hyps[0])
        tokens, lengths = state.tokens[0, :count], state.lengths[0, :count]
        n = int(lengths.min()) if count else 0
        differs = (tokens[:, :n] != tokens[:1, :n]).any(dim=0).nonzero()
        if len(differs):
            n = int(differs[0])
        return tuple(tokens[0, :n].tolist())

    def finalize(self) -> None:
        """End of utterance: unfinished keywords give their bonus back, and the hypotheses are
        ranked by log P + the bonus of the keywords they completed."""
        if self.trie is None or self.search is None:
            return
        final = []
        for h in self.beams:
            bonus = h.context_score - self.trie.pending(h.context_node)
            final.append(Hypothesis(h.tokens, h.frames, h.token_logprobs, h.p_blank, h.p_nonblank, bonus, 0))
        self.beams = sorted(final, key=lambda h: h.rank_score, reverse=True)

    def confidence(self, h: Hypothesis) -> float:
        """exp(length-normalized log-probability), normalized over frames."""
        return math.exp(h.score / self.frames) if self.frames else 0.0


def advance_batch(states: Sequence[CTCState], log_probs: torch.Tensor, lengths: Sequence[int]) -> None:
    """Advance every stream by its chunk: log_probs (B, T, V) CPU float32, row i valid for
    lengths[i] frames. Beam searches of equal beam size run as one batched operator call; the
    states change only once every call succeeded."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, state in enumerate(states):
        if state.search is not None:
            groups[state.beam_size].append(i)
    updates: dict[int, BeamState] = {}
    for beam, rows in groups.items():
        lp = log_probs if len(rows) == len(states) else log_probs[torch.tensor(rows)]
        result = ctc_prefix_beam_search(
            lp, torch.tensor([lengths[i] for i in rows]), BeamState.stack([states[i].search for i in rows]),  # type: ignore[misc]
            beam=beam, blank=BLANK_ID, frame_offset=torch.tensor([states[i].frames for i in rows]),
            tries=[states[i].trie for i in rows],
        )  # fmt: skip
        updates.update(zip(rows, result.rows(), strict=True))
    for i, state in enumerate(states):
        if state.search is None:
            state._advance_greedy(log_probs[i, : lengths[i]])
        else:
            state.search, state._ranked = updates[i], None
        state.frames += int(lengths[i])


def _common_prefix(seqs: list[tuple[int, ...]]) -> tuple[int, ...]:
    first = seqs[0]
    n = len(first)
    for seq in seqs[1:]:
        n = min(n, len(seq))
        while n and seq[:n] != first[:n]:
            n -= 1
    return first[:n]


__all__ = ["BLANK_ID", "CTCState", "advance_batch"]
