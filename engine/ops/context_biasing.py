"""Context biasing: keywords as a token trie whose paths earn a bonus during CTC prefix beam search.

A family tokenizes each keyword into unit ids (its own units/BPE) and builds one trie per
request; `ctc_prefix_beam_search` takes one trie per batch row. The interface is three calls:

    trie = ContextTrie.from_keywords([[17, 4, 9], [23, 5]], boost=3.0)   # per-token boost
    trie.step(node, token) -> (next_node, bonus_change)                  # the search's transition
    trie.pending(node) -> bonus of an unfinished keyword, taken back when the utterance ends

Scoring (WeNet's context graph, sherpa's keyword trie): each token that continues a keyword
adds the keyword's boost, so a hypothesis ranks by log P(prefix) + bonus. A token that breaks
a partial match gives back the part of the bonus not yet earned by a completed keyword and
starts over at the root (no Aho-Corasick failure links: a keyword that begins inside another
one's partial match is found from its own first token on). A completed keyword with no longer
keyword behind it returns to the root and keeps its bonus. Bonuses only reorder hypotheses;
the reported CTC scores stay acoustic.

The same arrays drive the C++/CUDA kernels: `nodes` (N, 2) int64 = (first edge, edge count),
`edges` (E, 2) int64 = (token, child) sorted by token within a node, `scores` (N, 2) float64
= (bonus accumulated from the root, the part of it completed keywords have earned). Node 0 is
the root; `concat` stacks the tries of a batch into one forest with a root per row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

DEFAULT_BOOST = 3.0
"""Bonus per matched keyword token (log-prob units; WeNet's default `context_score`)."""


@dataclass(frozen=True, eq=False)
class ContextTrie:
    nodes: torch.Tensor
    """(N, 2) int64: first edge and edge count of each node."""
    edges: torch.Tensor
    """(E, 2) int64: token and child node, sorted by token within a node."""
    scores: torch.Tensor
    """(N, 2) float64: bonus accumulated from the root; the part of it completed keywords earned."""

    @classmethod
    def from_keywords(
        cls, keywords: Sequence[Sequence[int]], boost: float | Sequence[float] = DEFAULT_BOOST
    ) -> ContextTrie:
        """A trie of token-id sequences; `boost` per token, one for all or one per keyword.
        Empty sequences are ignored; where keywords share a prefix the larger boost wins."""
        boosts = [float(boost)] * len(keywords) if isinstance(boost, (int, float)) else [float(b) for b in boost]
        if len(boosts) != len(keywords):
            raise ValueError(f"{len(boosts)} boosts for {len(keywords)} keywords")
        children: list[dict[int, int]] = [{}]
        edge_boost: list[float] = [0.0]  # of the edge into each node
        is_end = [False]
        for tokens, b in zip(keywords, boosts, strict=True):
            if not math.isfinite(b):
                raise ValueError(f"keyword boost must be finite, got {b}")
            node = 0
            for tok in tokens:
                if not isinstance(tok, int) or isinstance(tok, bool) or tok < 0:
                    raise ValueError(f"keyword tokens must be non-negative ints, got {tok!r}")
                nxt = children[node].get(tok)
                if nxt is None:
                    nxt = len(children)
                    children[node][tok] = nxt
                    children.append({})
                    edge_boost.append(b)
                    is_end.append(False)
                else:
                    edge_boost[nxt] = max(edge_boost[nxt], b)
                node = nxt
            if node:
                is_end[node] = True
        # Renumber breadth first so every node's edges are contiguous and sorted by token.
        order, new_id = [0], {0: 0}
        for old in order:
            for _tok, child in sorted(children[old].items()):
                new_id[child] = len(order)
                order.append(child)
        nodes, edges, scores = [], [], [(0.0, 0.0)] * len(order)
        for old in order:
            node_id = new_id[old]
            nodes.append((len(edges), len(children[old])))
            score, keep = scores[node_id]
            for tok, child in sorted(children[old].items()):
                edges.append((tok, new_id[child]))
                child_score = score + edge_boost[child]
                scores[new_id[child]] = (child_score, child_score if is_end[child] else keep)
        return cls(
            torch.tensor(nodes, dtype=torch.long).reshape(-1, 2),
            torch.tensor(edges, dtype=torch.long).reshape(-1, 2),
            torch.tensor(scores, dtype=torch.float64).reshape(-1, 2),
        )

    @classmethod
    def empty(cls) -> ContextTrie:
        return cls.from_keywords([])

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def is_empty(self) -> bool:
        return self.edges.shape[0] == 0

    @cached_property
    def _tables(self) -> tuple[dict[tuple[int, int], int], list[int], list[float], list[float]]:
        nodes = self.nodes.tolist()
        edges = self.edges.tolist()
        child = {(n, tok): c for n, (first, count) in enumerate(nodes) for tok, c in edges[first : first + count]}
        return child, [count for _, count in nodes], self.scores[:, 0].tolist(), self.scores[:, 1].tolist()

    def step(self, node: int, token: int, root: int = 0) -> tuple[int, float]:
        """Feed `token` at `node` (ids of this trie, or of a `concat` forest with the row's
        `root`): the next node and the change of the hypothesis' bonus."""
        child_of, num_edges, score, keep = self._tables
        child = child_of.get((node, token), -1)
        delta = 0.0
        if child < 0:
            delta = -(score[node] - keep[node])
            node = root
            child = child_of.get((root, token), -1)
            if child < 0:
                return root, delta
        delta += score[child] - score[node]
        return (root if num_edges[child] == 0 else child), delta

    def pending(self, node: int) -> float:
        """Bonus at `node` not yet earned by a completed keyword (given back at the end)."""
        _, _, score, keep = self._tables
        return score[node] - keep[node]

    @staticmethod
    def concat(tries: Sequence[ContextTrie | None]) -> tuple[ContextTrie | None, torch.Tensor]:
        """One forest for a batch: the tries side by side, and each row's root (-1: no trie).
        None when no row has a trie."""
        roots = torch.full((len(tries),), -1, dtype=torch.long)
        nodes, edges, scores = [], [], []
        num_nodes = num_edges = 0
        seen: dict[int, int] = {}  # a trie shared by several rows is stored once
        for row, trie in enumerate(tries):
            if trie is None:
                continue
            if id(trie) not in seen:
                seen[id(trie)] = num_nodes
                nodes.append(trie.nodes + torch.tensor([num_edges, 0]))
                edges.append(trie.edges + torch.tensor([0, num_nodes]))
                scores.append(trie.scores)
                num_nodes += trie.num_nodes
                num_edges += int(trie.edges.shape[0])
            roots[row] = seen[id(trie)]
        if not nodes:
            return None, roots
        return ContextTrie(torch.cat(nodes), torch.cat(edges), torch.cat(scores)), roots
