"""Batched greedy transducer decoding by label looping (RNN-T and TDT), NeMo's algorithm.

`greedy_label_looping(net, enc, lengths, state)` is a plain function over tensors: encoder frames
(B, T, D), their lengths and a decoding state in; tokens, their frames and log-probs per row and
the next state out. It is the reference for the compiled `rnnt_greedy_label_loop` operator.

Each outer iteration finds, for every row still inside its frames, the next non-blank label: the
joint is evaluated at the row's current frame; a blank moves the row on (by one frame, or by the
predicted duration for TDT, at least one) until a label or the end of the row's frames is found.
Found labels are emitted and fed to the prediction network. After `max_symbols` labels on one
frame the row is forced to the next frame. A TDT label carries its own duration and may jump
past the chunk's end; the overshoot is carried into the next chunk (`time_jump`).
Ties go to the lower id, as `torch.max` does in NeMo.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.models.nemo.transducer import Transducer, TransducerState


@dataclass
class GreedyResult:
    tokens: list[list[int]]
    frames: list[list[int]]
    """Absolute encoder frame of each token (chunk offset + frame within the chunk)."""
    logprobs: list[list[float]]
    """log P(token) under the joint's softmax over tokens + blank at the emitting step."""


def _joint_step(net: Transducer, f: torch.Tensor, pred: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One joint evaluation per row -> (labels, token log-probs, duration index)."""
    logits = net.joint(f, pred)
    vocab = net.blank + 1
    # NeMo's CPU joint applies log_softmax over every output before the argmax; do the same so
    # that ties resolve identically.
    full = logits.log_softmax(dim=-1)
    labels = full[:, :vocab].argmax(dim=-1)
    token_lp = logits[:, :vocab].log_softmax(dim=-1).gather(1, labels[:, None])[:, 0]
    duration_idx = full[:, vocab:].argmax(dim=-1) if net.is_tdt else None
    return labels, token_lp, duration_idx  # type: ignore[return-value]


@torch.inference_mode()
def greedy_label_looping(
    net: Transducer, enc: torch.Tensor, lengths: torch.Tensor, state: TransducerState, max_symbols: int
) -> tuple[GreedyResult, TransducerState]:
    b = enc.shape[0]
    device = enc.device
    f = net.joint.enc(enc)  # (B, T, Hj): projected once
    rows = torch.arange(b, device=device)
    tdt = net.is_tdt
    durations = net.durations
    time = state.time_jump.clone() if tdt else torch.zeros(b, dtype=torch.long, device=device)
    last_t = torch.clamp(lengths - 1, min=0)
    active = time < lengths
    last_nb_time = torch.full((b,), -1, dtype=torch.long, device=device)
    last_nb_count = torch.zeros(b, dtype=torch.long, device=device)
    h, c, pred = state.h, state.c, state.pred
    emitted: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    while bool(active.any()):
        active_before = active.clone()
        labels, scores, dur_idx = _joint_step(net, f[rows, torch.minimum(time, last_t)], pred)
        blank = labels == net.blank
        label_time = time.clone()
        if tdt:
            jump = durations[dur_idx].masked_fill(blank & (durations[dur_idx] == 0), 1)
            time = time + jump * active
        else:
            time = time + blank
        active = time < lengths
        advance = active & blank
        while bool(advance.any()):
            label_time = torch.where(advance, time, label_time)
            more, more_scores, dur_idx = _joint_step(net, f[rows, torch.minimum(time, last_t)], pred)
            labels = torch.where(advance, more, labels)
            scores = torch.where(advance, more_scores, scores)
            blank = labels == net.blank
            if tdt:
                jump = durations[dur_idx].masked_fill(blank & (durations[dur_idx] == 0), 1)
                time = torch.where(advance, time + jump, time)
            else:
                time = time + blank
            active = time < lengths
            advance = active & blank
        found = (active_before if tdt else active) & ~blank
        emitted.append((found, labels, label_time, scores))
        same_frame = last_nb_time == label_time
        last_nb_count = torch.where(found, torch.where(same_frame, last_nb_count + 1, 1), last_nb_count)
        last_nb_time = torch.where(found, label_time, last_nb_time)
        new_pred, (new_h, new_c) = net.predict(labels, (h, c))
        keep = found[:, None]
        pred = torch.where(keep, new_pred, pred)
        h = torch.where(keep[None], new_h, h)
        c = torch.where(keep[None], new_c, c)
        force = active & ~blank & (last_nb_count >= max_symbols) & (last_nb_time == time)
        time = time + force
        active = time < lengths
    result = _collect(emitted, b, state.frames_decoded)
    next_state = TransducerState(
        h, c, pred, (time - lengths) if tdt else torch.zeros_like(time), state.frames_decoded + lengths
    )
    return result, next_state


def _collect(
    emitted: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]], b: int, offset: torch.Tensor
) -> GreedyResult:
    tokens: list[list[int]] = [[] for _ in range(b)]
    frames: list[list[int]] = [[] for _ in range(b)]
    logprobs: list[list[float]] = [[] for _ in range(b)]
    if not emitted:
        return GreedyResult(tokens, frames, logprobs)
    found = torch.stack([e[0] for e in emitted], dim=1).cpu()  # (B, steps)
    labels = torch.stack([e[1] for e in emitted], dim=1).cpu()
    times = (torch.stack([e[2] for e in emitted], dim=1) + offset[:, None]).cpu()
    scores = torch.stack([e[3] for e in emitted], dim=1).float().cpu()
    for i in range(b):
        sel = found[i]
        tokens[i] = labels[i][sel].tolist()
        frames[i] = times[i][sel].tolist()
        logprobs[i] = scores[i][sel].tolist()
    return GreedyResult(tokens, frames, logprobs)
