"""CTC prefix beam search in Python: the reference the compiled kernels are tested against, and
the path the engine runs when `engine._C` is not available.

One frame (`prefix_beam_step`): only the `k = min(beam, V)` most likely units extend a prefix
(WeNet's pruning; ties go to the lower unit id); a prefix's probability is split into the paths
ending in blank and those ending in its last token; candidates rank by log P(prefix) plus their
context bonus (engine/ops/context_biasing.py), ties in the order the candidates were first
reached, and the `beam` best survive. A prefix's alignment is that of its most likely path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.ops.context_biasing import ContextTrie

NEG_INF = -math.inf


def logaddexp(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


@dataclass
class Hypothesis:
    tokens: tuple[int, ...] = ()
    frames: tuple[int, ...] = ()
    """Frame (encoder index) where each token was emitted: its CTC spike."""
    token_logprobs: tuple[float, ...] = ()
    p_blank: float = 0.0
    """log P(prefix, path ends in blank)."""
    p_nonblank: float = NEG_INF
    """log P(prefix, path ends in the prefix's last token)."""
    context_score: float = 0.0
    """Keyword bonus the prefix has earned (0 without biasing)."""
    context_node: int = 0
    """Trie node the prefix has reached, relative to its row's root."""

    @property
    def score(self) -> float:
        """log P(prefix): the acoustic score, without the keyword bonus."""
        return logaddexp(self.p_blank, self.p_nonblank)

    @property
    def rank_score(self) -> float:
        """What the search ranks by: log P(prefix) + bonus (NaN ranks last)."""
        key = self.score + self.context_score
        return key if key == key else NEG_INF


@dataclass
class _Pending:
    p_blank: float = NEG_INF
    p_nonblank: float = NEG_INF
    best: float = NEG_INF
    """Log-prob of the most likely path merged so far; its alignment is the prefix's."""
    frames: tuple[int, ...] | None = None
    token_logprobs: tuple[float, ...] = ()
    context_score: float = 0.0
    context_node: int = 0


def _add(
    nxt: dict[tuple[int, ...], _Pending], tokens: tuple[int, ...], frames: tuple[int, ...],
    lps: tuple[float, ...], context: tuple[float, int], blank: float = NEG_INF, nonblank: float = NEG_INF,
) -> None:  # fmt: skip
    e = nxt.get(tokens)
    if e is None:
        e = nxt[tokens] = _Pending(context_score=context[0], context_node=context[1])
    e.p_blank = logaddexp(e.p_blank, blank)
    e.p_nonblank = logaddexp(e.p_nonblank, nonblank)
    contrib = max(blank, nonblank)
    if e.frames is None or contrib > e.best:  # the first path sets the alignment, a better one replaces it
        e.best, e.frames, e.token_logprobs = contrib, frames, lps


def top_units(log_probs: torch.Tensor, k: int) -> tuple[list[list[int]], list[list[float]]]:
    """The k best units of each frame, best first, ties to the lower id (a stable sort: topk's
    order among equal values is unspecified)."""
    values, ids = torch.sort(log_probs, dim=-1, descending=True, stable=True)
    return ids[:, :k].tolist(), values[:, :k].tolist()


def prefix_beam_step(
    beams: list[Hypothesis], log_probs: torch.Tensor, first_frame: int, beam: int, blank: int,
    trie: ContextTrie | None = None, root: int = -1,
) -> list[Hypothesis]:  # fmt: skip
    """Advance `beams` over log_probs (T, V) whose row 0 is frame `first_frame`; `trie` and the
    row's `root` (-1: no biasing) score keywords."""
    top_ids, top_lps = top_units(log_probs, min(beam, int(log_probs.shape[-1])))
    for t in range(log_probs.shape[0]):
        frame = first_frame + t
        nxt: dict[tuple[int, ...], _Pending] = {}
        for tok, lp in zip(top_ids[t], top_lps[t], strict=True):
            for h in beams:
                same = (h.context_score, h.context_node)
                if tok == blank:
                    _add(nxt, h.tokens, h.frames, h.token_logprobs, same, blank=h.score + lp)
                    continue
                if h.tokens and tok == h.tokens[-1]:
                    # A repeat collapses onto the same prefix; after a blank it is a new token.
                    _add(nxt, h.tokens, h.frames, h.token_logprobs, same, nonblank=h.p_nonblank + lp)
                    gain = h.p_blank + lp
                else:
                    gain = h.score + lp
                ext = (*h.tokens, tok)
                context = same
                if trie is not None and root >= 0 and ext not in nxt:
                    node, delta = trie.step(root + h.context_node, tok, root)
                    context = (h.context_score + delta, node - root)
                _add(nxt, ext, (*h.frames, frame), (*h.token_logprobs, lp), context, nonblank=gain)
        ranked = sorted(nxt.items(), key=lambda kv: _rank_key(kv[1]), reverse=True)
        beams = [
            Hypothesis(tokens, e.frames or (), e.token_logprobs, e.p_blank, e.p_nonblank, e.context_score,
                       e.context_node)
            for tokens, e in ranked[:beam]
        ]  # fmt: skip
    return beams


def _rank_key(e: _Pending) -> float:
    key = logaddexp(e.p_blank, e.p_nonblank) + e.context_score
    return key if key == key else NEG_INF
