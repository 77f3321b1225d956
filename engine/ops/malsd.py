"""NeMo's batched transducer beam search, `malsd_batch` (modified alignment-length synchronous
decoding), resumable across chunks; the NeMo family's beam search.

Every row of the batch holds K hypotheses (a fixed beam; unused slots score -inf). Per step,
while any hypothesis is inside its frames:
1. the joint at each hypothesis' own frame gives log-probs over tokens + blank; each hypothesis
   proposes its K best outputs (keyword bonus added first, where the request has keywords);
2. candidates score (hypothesis score + output log-prob); a hypothesis past its last frame is
   final and competes with its score unchanged; one that has emitted `max_symbols` labels on its
   frame may only take blank; the K best candidates of the row survive;
3. hypotheses with equal labels (hash, last label and length) merge: the best keeps the log-sum
   of their scores, the others drop out;
4. the prediction network advances the hypotheses that took a label; blank moves a hypothesis to
   its next frame.
TDT transducers (`durations`: NeMo's ModifiedALSDBatchedTDTComputer): each hypothesis proposes
its K best (output, duration) pairs by summed log-probs; an output moves its hypothesis on by its
duration (blank by at least one frame), a label with duration 0 stays on its frame (counting
towards max_symbols); hypotheses merge only on the same frame; a duration past the chunk's end
carries into the next chunk (`time_jump`). Duration choices are read by value (NeMo reads the
index, the same for its usual 0..n durations).
The n-best order is NeMo's `score_norm`: score / (labels + 1). Ties and ordering follow NeMo's
tensor calls (torch.topk, argmax), so the tokens match NeMo's on the same model.

One deliberate difference: a row with no frames in a mixed batch stays inactive (NeMo's update
of its active mask can re-activate such a row on frame 0 of the padding).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from engine.ops.context_graph import ContextGraph
from engine.ops.transducer_beam import (
    BeamHypothesis,
    PredictorState,
    TransducerNet,
    cat_rows,
    common_prefix,
    context_rows,
    gather_rows,
    where_rows,
)

INACTIVE = -math.inf
NO_LABEL = -1
"""Label of a step that did not extend the hypothesis (it was already final)."""
HASH_MULTIPLIER = 6364136223846793005
"""Transcript hash: h' = h * MULTIPLIER + 1 + label (int64 wrap-around, as NeMo computes it)."""


@dataclass
class MalsdBeam:
    """One row's K hypotheses between chunks (NeMo's cross-chunk beam state and the transcripts)."""

    scores: torch.Tensor
    """(K,) float32: log P + keyword bonus; -inf for an empty slot."""
    state: PredictorState
    """K rows of predictor state."""
    last_label: torch.Tensor
    """(K,) int64 last emitted label (-1: none yet)."""
    hashes: torch.Tensor
    """(K,) int64 hash of the labels."""
    lengths: torch.Tensor
    """(K,) int64 labels emitted."""
    lasts: torch.Tensor
    """(K,) int64 labels emitted on the hypothesis' current frame (for max_symbols)."""
    nodes: torch.Tensor
    """(K,) int64 keyword-graph node."""
    bonus: torch.Tensor
    """(K,) float32 keyword bonus included in `scores`."""
    prefixes: list[BeamHypothesis]
    """The K transcripts (tokens, frames, log-probs) so far."""
    graph: ContextGraph | None = None
    time_jump: torch.Tensor | None = None
    """(K,) int64 TDT frames each hypothesis skips at the start of the next chunk (None: RNN-T)."""
    frames_decoded: int = 0
    """Encoder frames consumed before the next chunk (frame indices are absolute)."""

    @classmethod
    def initial(
        cls, net: TransducerNet, beam: int, graph: ContextGraph | None = None, tdt: bool = False
    ) -> MalsdBeam:
        scores = torch.full((beam,), INACTIVE)
        scores[0] = 0.0
        zeros = torch.zeros(beam, dtype=torch.long)
        return cls(scores, net.start(beam), torch.full((beam,), NO_LABEL), zeros.clone(), zeros.clone(),
                   zeros.clone(), zeros.clone(), torch.zeros(beam), [BeamHypothesis() for _ in range(beam)],
                   graph if graph is not None and not graph.is_empty else None,
                   zeros.clone() if tdt else None)  # fmt: skip

    @property
    def beam_size(self) -> int:
        return int(self.scores.shape[0])

    def hypotheses(self, final: bool = False) -> list[BeamHypothesis]:
        """Live hypotheses, best first by score / (labels + 1). `final`: an unfinished keyword
        match gives its bonus back first (the end of the utterance)."""
        scores, bonus = self.scores.tolist(), self.bonus.tolist()
        if final and self.graph is not None:
            ends = [self.graph.finalize(n) for n in self.nodes.tolist()]
            scores = [s + e for s, e in zip(scores, ends, strict=True)]
            bonus = [b + e for b, e in zip(bonus, ends, strict=True)]
        totals = torch.tensor(scores, dtype=self.scores.dtype)
        norm = totals / (self.lengths.to(totals.dtype) + 1)
        order = torch.sort(norm, descending=True).indices.tolist()
        out = []
        for k in order:
            if scores[k] == INACTIVE:
                continue
            p = self.prefixes[k]
            out.append(BeamHypothesis(list(p.tokens), list(p.frames), list(p.logprobs), scores[k] - bonus[k], bonus[k]))
        return out

    def stable_tokens(self) -> list[int]:
        """Tokens every live hypothesis starts with: no later chunk can change them."""
        live = [self.prefixes[k].tokens for k, s in enumerate(self.scores.tolist()) if s != INACTIVE]
        return common_prefix(live)


def _stack(beams: Sequence[MalsdBeam], name: str) -> torch.Tensor:
    return torch.stack([getattr(b, name) for b in beams])


class TdtNet(TransducerNet, Protocol):
    """A TDT transducer: the joint also scores durations."""

    def tdt_log_probs(self, frames: torch.Tensor, state: PredictorState) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected frames (N, Hj) -> log-probs over tokens + blank (N, V) and over durations (N, D)."""
        ...


@torch.inference_mode()
def malsd_search(
    net: TransducerNet, enc: torch.Tensor, lengths: torch.Tensor, beams: Sequence[MalsdBeam], max_symbols: int | None,
    durations: torch.Tensor | None = None,
) -> None:  # fmt: skip
    """Advance each row's beam over its chunk: projected frames enc (B, T, Hj) (`net.project`),
    row i valid for lengths[i]; `beams` (one per row, equal K) are updated in place. `durations`
    (D,) int64: a TDT transducer's duration choices (`net` is then a `TdtNet`)."""
    b, k = len(beams), beams[0].beam_size
    device = enc.device
    blank = net.blank
    lengths = lengths.to(device)
    scores = _stack(beams, "scores").to(device)
    last_label, hashes = _stack(beams, "last_label").to(device), _stack(beams, "hashes").to(device)
    n_labels, lasts = _stack(beams, "lengths").to(device), _stack(beams, "lasts").to(device)
    nodes, bonus = _stack(beams, "nodes"), _stack(beams, "bonus").to(device)
    state = cat_rows([bm.state for bm in beams])
    graphs = [bm.graph for bm in beams]
    biased = any(g is not None for g in graphs)

    rows = torch.arange(b, device=device)[:, None].expand(b, k)
    cand_source = torch.arange(k, device=device)[None, :, None].expand(b, k, k).reshape(b, -1)
    slots = torch.arange(k, device=device)[None]
    tdt = durations is not None
    time = (torch.stack([bm.time_jump for bm in beams]).to(device) if tdt  # type: ignore[misc]
            else torch.zeros(b, k, dtype=torch.long, device=device))  # fmt: skip
    last_t = torch.clamp(lengths - 1, min=0)[:, None].expand(b, k)
    has_frames = (lengths > 0)[:, None].expand(b, k)
    active = has_frames & (time <= last_t)
    history: list[tuple[torch.Tensor, ...]] = []
    while bool(active.any()):
        # 1. joint at each hypothesis' frame; each proposes its K best outputs
        frames = enc[rows.reshape(-1), torch.minimum(time, last_t).reshape(-1)]
        if tdt:
            lp, dur_lp = net.tdt_log_probs(frames, state)  # type: ignore[attr-defined]
            dur_lp = dur_lp.view(b, k, -1)
        else:
            lp = net.log_probs(frames, state)
        lp = lp.view(b, k, -1)
        ranked = lp
        if biased:
            deltas, nexts = context_rows(graphs, nodes, lp.shape[-1], blank)
            ranked = lp + deltas.to(device)
        if tdt:
            n_dur = dur_lp.shape[-1]
            top_lp, top_idx = torch.topk((ranked[..., :, None] + dur_lp[..., None, :]).view(b, k, -1), k, dim=-1,
                                         largest=True, sorted=True)  # fmt: skip
            top_labels = top_idx // n_dur
            top_dur = durations.to(device)[top_idx % n_dur]  # type: ignore[union-attr]
            top_dur = torch.where((top_labels == blank) & (top_dur == 0), 1, top_dur)
            forced_lp = lp[..., blank] + dur_lp.max(dim=-1).values
        else:
            top_lp, top_labels = torch.topk(ranked, k, dim=-1, largest=True, sorted=True)
            forced_lp = lp[..., blank]
        # 2. candidates: final hypotheses keep their score, max_symbols forces blank
        cand = torch.where(active[..., None], scores[..., None] + top_lp, INACTIVE)
        cand[..., 0] = torch.where(active, cand[..., 0], scores)
        top_labels = torch.where(active[..., None], top_labels, NO_LABEL)
        if max_symbols is not None:
            force = (lasts >= max_symbols) & active
            cand = torch.where(force[..., None], INACTIVE, cand)
            cand[..., 0] = torch.where(force, scores + forced_lp, cand[..., 0])
            top_labels = torch.where(force[..., None], blank, top_labels)
            if tdt:
                top_dur = torch.where(force[..., None] & (top_dur == 0), 1, top_dur)
        scores, pick = torch.topk(cand.view(b, -1), k, dim=-1, largest=True, sorted=True)
        src = torch.gather(cand_source, 1, pick)
        labels = torch.gather(top_labels.reshape(b, -1), 1, pick)
        is_blank = labels == blank
        is_label = (labels >= 0) & ~is_blank
        emit_time = torch.gather(time, 1, src)
        safe = labels.clamp(min=0)
        token_lp = lp[rows, src, safe]
        history.append((src, labels, emit_time, token_lp))
        if tdt:
            dur = torch.where(labels >= 0, torch.gather(top_dur.reshape(b, -1), 1, pick), 0)
            lasts = torch.where(dur > 0, 0, torch.gather(lasts, 1, src) + is_label)
        else:
            lasts = torch.where(is_blank, 0, torch.gather(lasts, 1, src) + is_label)
        n_labels = torch.gather(n_labels, 1, src) + is_label
        prev_hash = torch.gather(hashes, 1, src)
        hashes = torch.where(is_label, prev_hash * HASH_MULTIPLIER + 1 + labels, prev_hash)
        last_label = torch.where(is_label, labels, torch.gather(last_label, 1, src))
        if biased:
            cpu_rows, cpu_src, cpu_safe = rows.cpu(), src.cpu(), safe.cpu()
            nodes = torch.where(is_label.cpu(), nexts[cpu_rows, cpu_src, cpu_safe], torch.gather(nodes, 1, cpu_src))
            bonus = torch.gather(bonus, 1, src) + torch.where(is_label, deltas.to(device)[rows, src, safe], 0.0)
        # 3. merge hypotheses with equal labels
        if k > 1:
            equal = ((hashes[:, :, None] == hashes[:, None, :]) & (last_label[:, :, None] == last_label[:, None, :])
                     & (n_labels[:, :, None] == n_labels[:, None, :]))  # fmt: skip
            if tdt:  # a TDT hypothesis' frame is its own: equal labels on other frames stay apart
                next_time = emit_time + dur
                equal &= next_time[:, :, None] == next_time[:, None, :]
            merged = torch.where(equal, scores[:, None, :].expand(b, k, k), INACTIVE)
            keep = slots == merged.argmax(-1)
            scores = torch.where(keep, torch.logsumexp(merged, dim=-1), INACTIVE)
        # 4. the prediction network advances the hypotheses that took a label
        labels_wb = torch.where(labels >= 0, labels, blank)
        prev_state = gather_rows(state, (rows * k + src).reshape(-1))
        state = where_rows((labels_wb == blank).reshape(-1), prev_state, net.step(labels_wb.reshape(-1), prev_state))
        time = emit_time + (dur if tdt else is_blank)
        active = has_frames & (time <= last_t)
    _write_back(beams, history, blank, lengths, scores, state, last_label, hashes, n_labels, lasts, nodes, bonus)
    if tdt:
        jumps = torch.clamp(time - lengths[:, None], min=0).cpu()
        for i, beam in enumerate(beams):
            beam.time_jump = jumps[i]


def _write_back(
    beams: Sequence[MalsdBeam], history: list[tuple[torch.Tensor, ...]], blank: int, lengths: torch.Tensor,
    scores: torch.Tensor, state: PredictorState, last_label: torch.Tensor, hashes: torch.Tensor,
    n_labels: torch.Tensor, lasts: torch.Tensor, nodes: torch.Tensor, bonus: torch.Tensor,
) -> None:  # fmt: skip
    """Trace each surviving hypothesis back through the chunk's steps and append its labels to the
    transcript of the hypothesis it grew from."""
    b, k = scores.shape
    chunk: list[list[list[tuple[int, int, float]]]] = [[[] for _ in range(k)] for _ in range(b)]
    roots = torch.arange(k)[None].expand(b, k)
    if history:
        srcs, labels, times, lps = (torch.stack(t).cpu() for t in zip(*history, strict=True))
        ptr = roots
        picked_labels, picked_times, picked_lps = [], [], []
        for s in range(len(history) - 1, -1, -1):
            picked_labels.append(labels[s].gather(1, ptr))
            picked_times.append(times[s].gather(1, ptr))
            picked_lps.append(lps[s].gather(1, ptr))
            ptr = srcs[s].gather(1, ptr)
        roots = ptr
        lab = torch.stack(picked_labels[::-1], dim=-1).tolist()  # (B, K, S) in step order
        tim = torch.stack(picked_times[::-1], dim=-1).tolist()
        lpr = torch.stack(picked_lps[::-1], dim=-1).tolist()
        for i in range(b):
            for j in range(k):
                chunk[i][j] = [(t, f, p) for t, f, p in zip(lab[i][j], tim[i][j], lpr[i][j], strict=True)
                               if t >= 0 and t != blank]  # fmt: skip
    root_list = roots.tolist()
    per_row = [state_part.view(b, k, *state_part.shape[1:]) for state_part in state]
    for i, beam in enumerate(beams):
        offset = beam.frames_decoded
        new_prefixes = []
        for j in range(k):
            old = beam.prefixes[root_list[i][j]]
            tokens, frames, logprobs = list(old.tokens), list(old.frames), list(old.logprobs)
            for label, frame, logprob in chunk[i][j]:
                tokens.append(label)
                frames.append(frame + offset)
                logprobs.append(logprob)
            new_prefixes.append(BeamHypothesis(tokens, frames, logprobs))
        beam.prefixes = new_prefixes
        beam.scores, beam.last_label, beam.hashes = scores[i].cpu(), last_label[i].cpu(), hashes[i].cpu()
        beam.lengths, beam.lasts, beam.nodes, beam.bonus = n_labels[i].cpu(), lasts[i].cpu(), nodes[i].cpu(), \
            bonus[i].cpu()  # fmt: skip
        beam.state = tuple(part[i] for part in per_row)
        beam.frames_decoded = offset + int(lengths[i])


__all__ = ["MalsdBeam", "malsd_search"]
