"""What transducer beam searches share: the model seam (`TransducerNet`), per-row predictor state,
the hypotheses they report (n-best with scores) and keyword biasing (`ContextGraph`).

Two searches build on it, each its reference's own algorithm:
- `engine/ops/malsd.py`: NeMo's batched modified alignment-length synchronous decoding
  (`malsd_batch`): a fixed beam of K hypotheses per row advanced together, up to `max_symbols`
  labels per frame;
- `engine/ops/modified_beam.py`: icefall's / sherpa's modified beam search: one symbol per frame,
  a set of up to K hypotheses per row.
Both are resumable: a stream's beam is carried from chunk to chunk.

A model plugs in by giving, for a batch of hypotheses (rows), its prediction network step and its
joint (NeMo's LSTM predictor carries (h, c); icefall's stateless predictor carries its last
`context_size` tokens):

    class MyNet:                                    # satisfies TransducerNet
        blank = 0
        def project(self, enc): ...                 # (B, T, D) -> (B, T, Hj) encoder side of the joint
        def start(self, rows): ...                  # state after the start symbol, `rows` copies
        def step(self, labels, state): ...          # (N,) labels -> state after emitting them
        def log_probs(self, frames, state): ...     # (N, Hj) projected frames -> (N, V) log-probs
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.ops.context_graph import ContextGraph

PredictorState = tuple[torch.Tensor, ...]
"""A batch of hypotheses' predictor state: every tensor has one row per hypothesis on dim 0."""


class TransducerNet(Protocol):
    """A transducer's prediction network and joint, as the beam searches call them."""

    @property
    def blank(self) -> int:
        """Output index of blank."""
        ...

    def project(self, enc: torch.Tensor) -> torch.Tensor:
        """Encoder frames (B, T, D) -> the joint's projection of them (B, T, Hj), once per chunk."""
        ...

    def start(self, rows: int) -> PredictorState:
        """The state after the start symbol, for `rows` hypotheses."""
        ...

    def step(self, labels: torch.Tensor, state: PredictorState) -> PredictorState:
        """The state after each row emits its label (N,) (never blank)."""
        ...

    def log_probs(self, frames: torch.Tensor, state: PredictorState) -> torch.Tensor:
        """Projected frames (N, Hj), one per row -> log-probabilities (N, V) over tokens and blank."""
        ...


def gather_rows(state: PredictorState, index: torch.Tensor) -> PredictorState:
    return tuple(t.index_select(0, index) for t in state)


def where_rows(keep_old: torch.Tensor, old: PredictorState, new: PredictorState) -> PredictorState:
    """Row-wise: `old` where keep_old (N,) is True, else `new`."""
    return tuple(torch.where(keep_old.view(-1, *([1] * (o.dim() - 1))), o, n) for o, n in zip(old, new, strict=True))


def cat_rows(states: Sequence[PredictorState]) -> PredictorState:
    return tuple(torch.cat(parts) for parts in zip(*states, strict=True))


@dataclass
class BeamHypothesis:
    """One hypothesis of a finished (or in-progress) search."""

    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    """Absolute encoder frame of each token."""
    logprobs: list[float] = field(default_factory=list)
    """log P(token) under the joint at the step that emitted it."""
    score: float = 0.0
    """log P of the hypothesis (its paths summed where the search merged them), without keyword bonus."""
    bonus: float = 0.0
    """Keyword bonus it carries (what biasing added to `score` to rank it)."""

    @property
    def total(self) -> float:
        return self.score + self.bonus


def context_rows(
    graphs: Sequence[ContextGraph | None], nodes: torch.Tensor, vocab: int, blank: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bonus change and next graph node of every output for every hypothesis: nodes (B, K) ->
    (B, K, V) float32, (B, K, V) int64. Blank earns nothing and keeps the node; a row without a
    graph earns nothing."""
    b, k = nodes.shape
    deltas = torch.zeros(b, k, vocab)
    nexts = torch.zeros(b, k, vocab, dtype=torch.long)
    node_list = nodes.tolist()
    for i, graph in enumerate(graphs):
        if graph is None or graph.is_empty:
            continue
        for j, node in enumerate(node_list[i]):
            d, n = graph.row(node, vocab)
            deltas[i, j], nexts[i, j] = d, n
    deltas[..., blank] = 0.0
    nexts[..., blank] = nodes
    return deltas, nexts


def common_prefix(sequences: Sequence[Sequence[int]]) -> list[int]:
    """The longest token prefix all sequences share (a stream's committed tokens under a beam)."""
    if not sequences:
        return []
    first = sequences[0]
    n = min(len(s) for s in sequences)
    for i in range(n):
        if any(s[i] != first[i] for s in sequences[1:]):
            return list(first[:i])
    return list(first[:n])


__all__ = [
    "BeamHypothesis",
    "PredictorState",
    "TransducerNet",
    "cat_rows",
    "common_prefix",
    "context_rows",
    "gather_rows",
    "where_rows",
]
