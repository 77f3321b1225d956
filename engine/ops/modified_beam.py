"""icefall's and sherpa's modified beam search (one symbol per frame), resumable across chunks;
the Zipformer family's beam search.

Each row holds a set of up to K hypotheses, keyed by their tokens. Per frame, every hypothesis of
every row is scored by the joint at that frame in one batched call; in each row the K best
(hypothesis, output) pairs over all of its hypotheses survive: blank keeps the tokens, a token
is appended (at most one per frame) and moves the hypothesis' keyword-graph node, whose bonus is
added to its score after the selection (as icefall adds its ContextGraph score). Hypotheses that
end with equal tokens merge: log-add of their scores; the first one keeps its frames and state.
A stream carries its set from chunk to chunk (sherpa's streaming form); the utterance ends by
taking back unfinished keyword bonuses, and the best hypothesis is the one with the highest
score / (tokens + context_size), icefall's length normalisation (its token history starts with
`context_size` padding and blank entries). Scores stay float32 tensors, as in icefall, so ties
and merges round as they do there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from engine.ops.context_graph import ContextGraph
from engine.ops.transducer_beam import BeamHypothesis, PredictorState, TransducerNet, cat_rows, common_prefix


@dataclass(eq=False)
class _Hyp:
    tokens: tuple[int, ...]
    frames: list[int]
    logprobs: list[float]
    log_prob: torch.Tensor
    """0-d float32: log P + keyword bonus (icefall's `log_prob`)."""
    bonus: float = 0.0
    node: int = 0
    state: PredictorState | None = None
    """Predictor state after `tokens` (None until computed from the parent's and the last token)."""
    parent_state: PredictorState | None = None


@dataclass(eq=False)
class ModifiedBeam:
    """One row's hypothesis set between chunks."""

    beam_size: int
    norm_offset: int
    """Added to the token count in the final length normalisation (icefall: context_size)."""
    graph: ContextGraph | None = None
    hyps: dict[tuple[int, ...], _Hyp] = field(default_factory=dict)
    frames_decoded: int = 0

    @classmethod
    def initial(cls, net: TransducerNet, beam: int, norm_offset: int, graph: ContextGraph | None = None) -> ModifiedBeam:
        start = _Hyp((), [], [], torch.zeros((), dtype=torch.float32), state=net.start(1))
        return cls(beam, norm_offset, graph if graph is not None and not graph.is_empty else None, {(): start})

    def hypotheses(self, final: bool = False) -> list[BeamHypothesis]:
        """All hypotheses, best first by score / (tokens + norm_offset); `final`: unfinished
        keyword matches give their bonus back first (the end of the utterance)."""
        ranked = []
        for h in self.hyps.values():
            end = self.graph.finalize(h.node) if final and self.graph is not None else 0.0
            total = h.log_prob + end if end else h.log_prob  # float32, as icefall ranks
            key = float(total / (len(h.tokens) + self.norm_offset))
            bonus = h.bonus + end
            ranked.append((key, BeamHypothesis(list(h.tokens), list(h.frames), list(h.logprobs),
                                               float(total) - bonus, bonus)))  # fmt: skip
        return [h for _, h in sorted(ranked, key=lambda kh: kh[0], reverse=True)]

    def stable_tokens(self) -> list[int]:
        """Tokens every hypothesis starts with: no later chunk can change them."""
        return common_prefix([list(k) for k in self.hyps])


def _fill_states(net: TransducerNet, hyps: list[_Hyp]) -> None:
    """Predictor states of hypotheses that took a token at the last frame, in one batched step."""
    todo = [h for h in hyps if h.state is None]
    if not todo:
        return
    parents = cat_rows([h.parent_state for h in todo])  # type: ignore[misc]
    labels = torch.tensor([h.tokens[-1] for h in todo], dtype=torch.long, device=parents[0].device)
    new = net.step(labels, parents)
    for i, h in enumerate(todo):
        h.state = tuple(part[i : i + 1] for part in new)
        h.parent_state = None


@torch.inference_mode()
def modified_beam_search(
    net: TransducerNet, enc: torch.Tensor, lengths: Sequence[int], beams: Sequence[ModifiedBeam]
) -> None:
    """Advance each row's hypothesis set over its frames: projected frames enc (B, T, Hj)
    (`net.project`), row i valid for lengths[i]; `beams` are updated in place."""
    blank = net.blank
    for t in range(max(lengths, default=0)):
        active = [i for i, n in enumerate(lengths) if t < n]
        sets = [list(beams[i].hyps.values()) for i in active]
        flat = [h for hs in sets for h in hs]
        _fill_states(net, flat)
        rows = torch.tensor([i for i, hs in zip(active, sets, strict=True) for _ in hs], device=enc.device)
        lp = net.log_probs(enc[rows, t], cat_rows([h.state for h in flat]))  # type: ignore[misc]
        vocab = lp.shape[-1]
        scored = lp + torch.stack([h.log_prob for h in flat]).to(lp)[:, None]
        first = 0
        for i, hs in zip(active, sets, strict=True):
            beam = beams[i]
            values, picks = scored[first : first + len(hs)].reshape(-1).topk(min(beam.beam_size, len(hs) * vocab))
            chosen: dict[tuple[int, ...], _Hyp] = {}
            for value, pick in zip(values, picks.tolist(), strict=True):
                src, tok = divmod(pick, vocab)
                h = hs[src]
                if tok == blank:
                    new = _Hyp(h.tokens, h.frames, h.logprobs, value, h.bonus, h.node, h.state)
                else:
                    delta, node = beam.graph.step(h.node, tok) if beam.graph is not None else (0.0, 0)
                    new = _Hyp((*h.tokens, tok), [*h.frames, beam.frames_decoded + t],
                               [*h.logprobs, float(lp[first + src, tok])], value + delta if delta else value,
                               h.bonus + delta, node, None, h.state)  # fmt: skip
                old = chosen.get(new.tokens)
                if old is None:
                    chosen[new.tokens] = new
                else:
                    old.log_prob = torch.logaddexp(old.log_prob, new.log_prob)
            beam.hyps = chosen
            first += len(hs)
    for beam, n in zip(beams, lengths, strict=True):
        beam.frames_decoded += n
        _fill_states(net, list(beam.hyps.values()))


__all__ = ["ModifiedBeam", "modified_beam_search"]
