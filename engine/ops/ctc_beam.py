"""Batched, resumable CTC prefix beam search: `torch.ops.oasr.ctc_prefix_beam_search` when the
extension is loaded, the Python reference otherwise.

A search's state is a `BeamState`: for each of B rows up to K hypotheses, their tokens and
alignments padded to L. Feed it frames chunk by chunk (streaming) or all at once (offline);
every call returns the next state. Usage:

    state = BeamState.initial(batch=2)
    state = ctc_prefix_beam_search(log_probs, lengths, state, beam=10, blank=0)   # (B, T, V) chunk
    best = state.hypotheses(row=0)[0]

Per-row keyword biasing: `tries=[ContextTrie | None per row]` (engine/ops/context_biasing.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from engine.ops.context_biasing import ContextTrie
from engine.ops.ctc_reference import NEG_INF, Hypothesis, prefix_beam_step
from engine.ops.extension import kernel_for
from engine.ops.extension import use_extension as resolve_use_extension


@dataclass
class BeamState:
    """Hypotheses of B rows, best first. Slots past `num_hyps` (and tokens past `lengths`) are padding."""

    num_hyps: torch.Tensor
    """(B,) int64."""
    tokens: torch.Tensor
    """(B, K, L) int64."""
    frames: torch.Tensor
    """(B, K, L) int64: absolute frame of each token's CTC spike."""
    token_logprobs: torch.Tensor
    """(B, K, L) float32: log-prob of each token at its spike."""
    lengths: torch.Tensor
    """(B, K) int64: tokens per hypothesis."""
    scores: torch.Tensor
    """(B, K, 3) float64: log P(prefix, ends in blank), log P(prefix, ends in its last token), bonus."""
    context: torch.Tensor
    """(B, K) int64: trie node of each hypothesis, relative to the row's root."""

    @classmethod
    def initial(cls, batch: int, device: torch.device | str = "cpu") -> BeamState:
        """One empty hypothesis per row (log P = 0, all paths so far end in blank)."""
        scores = torch.tensor([0.0, NEG_INF, 0.0], dtype=torch.float64, device=device).expand(batch, 1, 3)
        long = {"dtype": torch.long, "device": device}
        return cls(
            num_hyps=torch.ones(batch, **long), tokens=torch.zeros(batch, 1, 0, **long),
            frames=torch.zeros(batch, 1, 0, **long),
            token_logprobs=torch.zeros(batch, 1, 0, dtype=torch.float32, device=device),
            lengths=torch.zeros(batch, 1, **long), scores=scores.clone(), context=torch.zeros(batch, 1, **long),
        )  # fmt: skip

    @property
    def batch(self) -> int:
        return int(self.num_hyps.shape[0])

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    def trimmed(self) -> BeamState:
        """The same state without padding columns past the longest hypothesis."""
        longest = int(self.lengths.max()) if self.lengths.numel() else 0
        if longest == self.tokens.shape[2]:
            return self
        return BeamState(self.num_hyps, self.tokens[:, :, :longest], self.frames[:, :, :longest],
                         self.token_logprobs[:, :, :longest], self.lengths, self.scores, self.context)  # fmt: skip

    def rows(self) -> list[BeamState]:
        """One single-row state per row, each trimmed to its own hypotheses and tokens."""
        out = []
        counts = self.num_hyps.tolist()
        for b, k in enumerate(counts):
            k = max(int(k), 1)
            longest = int(self.lengths[b, :k].max())
            out.append(BeamState(
                self.num_hyps[b : b + 1], self.tokens[b : b + 1, :k, :longest], self.frames[b : b + 1, :k, :longest],
                self.token_logprobs[b : b + 1, :k, :longest], self.lengths[b : b + 1, :k],
                self.scores[b : b + 1, :k], self.context[b : b + 1, :k],
            ))  # fmt: skip
        return out

    @staticmethod
    def stack(states: Sequence[BeamState]) -> BeamState:
        """Rows of several states in one state, padded to the widest (K, L)."""
        k = max(s.tokens.shape[1] for s in states)
        n = max(s.tokens.shape[2] for s in states)

        def pad(name: str, value: float) -> torch.Tensor:
            parts = []
            for s in states:
                t = getattr(s, name)
                widths = [0, 0] * (t.dim() - 1)
                if name in ("tokens", "frames", "token_logprobs"):
                    widths = [0, n - t.shape[2], 0, k - t.shape[1]]
                elif name == "scores":
                    widths = [0, 0, 0, k - t.shape[1]]
                elif t.dim() == 2:
                    widths = [0, k - t.shape[1]]
                parts.append(torch.nn.functional.pad(t, widths, value=value) if any(widths) else t)
            return torch.cat(parts)

        return BeamState(
            num_hyps=torch.cat([s.num_hyps for s in states]), tokens=pad("tokens", 0), frames=pad("frames", 0),
            token_logprobs=pad("token_logprobs", 0.0), lengths=pad("lengths", 0), scores=pad("scores", NEG_INF),
            context=pad("context", 0),
        )  # fmt: skip

    def hypotheses(self, row: int = 0, limit: int | None = None) -> list[Hypothesis]:
        """Row `row`'s hypotheses, best first (at most `limit`)."""
        count = int(self.num_hyps[row])
        if limit is not None:
            count = min(count, limit)
        lengths = self.lengths[row, :count].tolist()
        tokens = self.tokens[row, :count].tolist()
        frames = self.frames[row, :count].tolist()
        lps = self.token_logprobs[row, :count].tolist()
        scores = self.scores[row, :count].tolist()
        context = self.context[row, :count].tolist()
        return [
            Hypothesis(tuple(tokens[h][:n]), tuple(frames[h][:n]), tuple(lps[h][:n]), scores[h][0], scores[h][1],
                       scores[h][2], context[h])
            for h, n in enumerate(lengths)
        ]  # fmt: skip

    @classmethod
    def from_hypotheses(cls, rows: Sequence[Sequence[Hypothesis]], beam: int, cap: int) -> BeamState:
        """Rows of hypotheses in a state of shape (B, beam, cap), padded like the kernels pad."""
        b = len(rows)
        state = cls(
            num_hyps=torch.tensor([len(r) for r in rows], dtype=torch.long),
            tokens=torch.zeros(b, beam, cap, dtype=torch.long), frames=torch.zeros(b, beam, cap, dtype=torch.long),
            token_logprobs=torch.zeros(b, beam, cap, dtype=torch.float32), lengths=torch.zeros(b, beam, dtype=torch.long),
            scores=torch.full((b, beam, 3), NEG_INF, dtype=torch.float64), context=torch.zeros(b, beam, dtype=torch.long),
        )  # fmt: skip
        for i, hyps in enumerate(rows):
            for h, hyp in enumerate(hyps):
                n = len(hyp.tokens)
                state.tokens[i, h, :n] = torch.tensor(hyp.tokens, dtype=torch.long)
                state.frames[i, h, :n] = torch.tensor(hyp.frames, dtype=torch.long)
                state.token_logprobs[i, h, :n] = torch.tensor(hyp.token_logprobs, dtype=torch.float32)
                state.lengths[i, h] = n
                state.scores[i, h] = torch.tensor([hyp.p_blank, hyp.p_nonblank, hyp.context_score], dtype=torch.float64)
                state.context[i, h] = hyp.context_node
        return state


def ctc_prefix_beam_search_reference(
    log_probs: torch.Tensor, lengths: torch.Tensor, frame_offset: torch.Tensor, num_hyps: torch.Tensor,
    hyp_tokens: torch.Tensor, hyp_frames: torch.Tensor, hyp_token_logprobs: torch.Tensor,
    hyp_lengths: torch.Tensor, hyp_scores: torch.Tensor, hyp_context: torch.Tensor, beam: int, blank: int,
    trie_nodes: torch.Tensor | None = None, trie_edges: torch.Tensor | None = None,
    trie_scores: torch.Tensor | None = None, trie_roots: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """The operator's Python reference: same arguments, same outputs (rows one at a time)."""
    state = BeamState(num_hyps, hyp_tokens, hyp_frames, hyp_token_logprobs, hyp_lengths, hyp_scores, hyp_context)
    trie = None if trie_nodes is None else ContextTrie(trie_nodes, trie_edges, trie_scores)  # type: ignore[arg-type]
    roots = trie_roots.tolist() if trie_roots is not None else [-1] * state.batch
    lens, offsets = lengths.tolist(), frame_offset.tolist()
    rows = []
    for b in range(state.batch):
        beams = state.hypotheses(b)
        if lens[b]:
            beams = prefix_beam_step(beams, log_probs[b, : lens[b]], offsets[b], beam, blank, trie, roots[b])
        rows.append(beams)
    cap = hyp_tokens.shape[2] + log_probs.shape[1]
    return BeamState.from_hypotheses(rows, beam, cap).tensors()


def ctc_prefix_beam_search(
    log_probs: torch.Tensor, lengths: torch.Tensor, state: BeamState, *, beam: int, blank: int,
    frame_offset: torch.Tensor | None = None, tries: Sequence[ContextTrie | None] | None = None,
    use_extension: bool | None = None,
) -> BeamState:  # fmt: skip
    """Advance `state` over log_probs (B, T, V) float32, `lengths` (B,) valid frames per row.
    `frame_offset` (B,): absolute index of each row's first frame (for the token alignment);
    `tries`: one keyword trie (or None) per row. Returns the new state, trimmed."""
    if frame_offset is None:
        frame_offset = torch.zeros_like(lengths)
    trie, roots = ContextTrie.concat(tries) if tries is not None else (None, None)
    trie_args = (None, None, None, None) if trie is None else (trie.nodes, trie.edges, trie.scores, roots)
    if use_extension is None:
        use_extension = kernel_for(log_probs.device)
    if resolve_use_extension(use_extension):
        device = log_probs.device
        trie_args = tuple(None if t is None else t.to(device) for t in trie_args)  # type: ignore[assignment]
        op = torch.ops.oasr.ctc_prefix_beam_search
    else:
        op = ctc_prefix_beam_search_reference
    out = op(log_probs, lengths, frame_offset, *state.tensors(), beam, blank, *trie_args)
    return BeamState(*out).trimmed()
