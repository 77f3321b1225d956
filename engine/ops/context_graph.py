"""Keyword biasing for transducer beam searches: icefall's ContextGraph (an Aho-Corasick automaton
over keyword token sequences) on the keyword trie that CTC biasing uses (`ContextTrie`).

A hypothesis carries one graph node; each emitted token moves it (`step`) and changes its bonus:
- a token that continues a keyword earns the keyword's per-token boost;
- a token that breaks a partial match follows the failure arcs to the longest keyword prefix that
  is a suffix of what was matched, and gives back the bonus of the part that no longer matches
  (to the root when none does: the whole unfinished bonus is given back);
- on completing a keyword (the node, or a node on its failure chain, ends a keyword) the
  hypothesis keeps the completed keyword's bonus and returns to the root (icefall's non-strict
  mode: one match at a time, the longest keyword ending there wins);
- at the end of the utterance `finalize` takes back the bonus of an unfinished match.

Unlike `ContextTrie.step` (WeNet's trie, used by CTC beam search), a keyword that begins inside
another's partial match is found here from inside it (the failure arcs), as icefall finds it.

For vectorised searches `row(node)` gives every token's bonus change and next node from `node`
as (V,) tensors, built once per node.

    graph = ContextGraph.from_keywords([[17, 4, 9], [23, 5]], boost=3.0)
    delta, node = graph.step(graph.root, 17)
    deltas, nodes = graph.row(node, vocab=128)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from engine.ops.context_biasing import DEFAULT_BOOST, ContextTrie


@dataclass(eq=False)
class ContextGraph:
    trie: ContextTrie
    """The keyword trie (node 0 is the root; nodes are numbered breadth first)."""
    children: list[dict[int, int]]
    node_score: list[float]
    """Bonus accumulated from the root to each node."""
    fail: list[int]
    """Failure arc: the node of the longest proper suffix of the node's path that is a keyword prefix."""
    match_score: list[float | None]
    """Bonus kept on reaching the node when it completes a keyword (the longest keyword ending
    there: the node's own, else the nearest on its failure chain); None when none ends there."""
    _rows: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)

    root = 0

    @classmethod
    def from_keywords(
        cls, keywords: Sequence[Sequence[int]], boost: float | Sequence[float] = DEFAULT_BOOST
    ) -> ContextGraph:
        """Token-id sequences and their per-token boost (one for all, or one per keyword; > 0)."""
        boosts = [boost] * len(keywords) if isinstance(boost, (int, float)) else list(boost)
        if any(b <= 0 for b in boosts):
            raise ValueError(f"keyword boosts must be > 0, got {boosts}")
        return cls.from_trie(ContextTrie.from_keywords(keywords, boost))

    @classmethod
    def from_trie(cls, trie: ContextTrie) -> ContextGraph:
        nodes, edges = trie.nodes.tolist(), trie.edges.tolist()
        score, keep = trie.scores[:, 0].tolist(), trie.scores[:, 1].tolist()
        children = [{tok: child for tok, child in edges[first : first + count]} for first, count in nodes]
        # The trie stores, per node, the bonus completed keywords earned on its path; with positive
        # boosts that equals the node's own bonus exactly when a keyword ends at the node.
        is_end = [n != 0 and keep[n] == score[n] for n in range(len(nodes))]
        fail = [0] * len(nodes)
        output: list[int | None] = [None] * len(nodes)
        for node in range(len(nodes)):  # breadth-first order: parents' arcs are ready
            for tok, child in children[node].items():
                if node == 0:
                    continue  # a root child fails to the root
                f = fail[node]
                while tok not in children[f] and f != 0:
                    f = fail[f]
                fail[child] = children[f].get(tok, 0)
                out = fail[child]
                while out != 0 and not is_end[out]:
                    out = fail[out]
                output[child] = out or None
        match: list[float | None] = [
            score[n] if is_end[n] else (score[o] if (o := output[n]) is not None else None)
            for n in range(len(nodes))
        ]
        return cls(trie, children, score, fail, match)

    @property
    def is_empty(self) -> bool:
        return self.trie.is_empty

    def _goto(self, node: int, token: int) -> int:
        while token not in self.children[node] and node != 0:
            node = self.fail[node]
        return self.children[node].get(token, 0)

    def step(self, node: int, token: int) -> tuple[float, int]:
        """Emit `token` at `node`: (bonus change, next node)."""
        nxt = self._goto(node, token)
        delta = self.node_score[nxt] - self.node_score[node]
        kept = self.match_score[nxt]
        if kept is not None:
            return delta + kept - self.node_score[nxt], self.root
        return delta, nxt

    def finalize(self, node: int) -> float:
        """Bonus change at the end of the utterance: the unfinished match's bonus is taken back."""
        return -self.node_score[node]

    def row(self, node: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(V,) float32 bonus change and (V,) int64 next node of every token emitted at `node`."""
        key = (node, vocab)
        cached = self._rows.get(key)
        if cached is None:
            deltas = torch.full((vocab,), -self.node_score[node], dtype=torch.float32)
            nexts = torch.zeros(vocab, dtype=torch.long)
            tokens: set[int] = set()
            walk = node
            while True:  # only tokens with an arc on the failure chain differ from 'back to the root'
                tokens.update(self.children[walk])
                if walk == 0:
                    break
                walk = self.fail[walk]
            for tok in tokens:
                if tok < vocab:
                    d, n = self.step(node, tok)
                    deltas[tok], nexts[tok] = d, n
            cached = self._rows[key] = (deltas, nexts)
        return cached


__all__ = ["ContextGraph"]
