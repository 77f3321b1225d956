"""Batched greedy transducer decoding by label looping (RNN-T and TDT): the compiled
`torch.ops.oasr.rnnt_greedy_label_loop` (the loop and its bookkeeping in C++/CUDA, the
prediction network and joint through the same ATen calls) or the Python reference.

The algorithm and the weight layout are NeMo's, as the NeMo family implements them
(engine/models/nemo/greedy.py on the `nemo` branch): for every row still inside its frames, the
joint is evaluated at the row's frame; a blank moves the row on (one frame, or the predicted
duration for TDT, at least one) until a label or the end of the row's frames; found labels are
emitted and fed to the prediction network; after `max_symbols` labels on one frame the row is
forced to the next frame; a TDT label may jump past the chunk's end and the overshoot carries
into the next chunk (`time_jump`). Blank = vocabulary size; ties go to the lower id.

    weights = TransducerWeights.from_state_dict(model.state_dict(), activation="relu")
    state = weights.initial_state(batch)
    out, state = rnnt_greedy_label_loop(weights.project(enc), lengths, state, weights, max_symbols=10)
    out.row(0) -> (tokens, frames, log-probs) of row 0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from engine.ops.extension import kernel_for
from engine.ops.extension import use_extension as resolve_use_extension

ACTIVATIONS = ("relu", "tanh", "sigmoid")


@dataclass(frozen=True, eq=False)
class TransducerWeights:
    """Prediction network + joint as plain tensors, in NeMo's layout (module names in brackets)."""

    embed: torch.Tensor
    """(V + 1, H) [decoder.prediction.embed]: blank = V is its padding row (embeds to zeros)."""
    lstm: tuple[torch.Tensor, ...]
    """[decoder.prediction.dec_rnn.lstm] per layer weight_ih (4H, H), weight_hh (4H, H), bias_ih,
    bias_hh (4H,): nn.LSTM's flat order (gates i, f, g, o)."""
    pred_weight: torch.Tensor
    """(Hj, H) [joint.pred]."""
    pred_bias: torch.Tensor
    enc_weight: torch.Tensor
    """(Hj, D) [joint.enc]: applied once to all frames (`project`)."""
    enc_bias: torch.Tensor
    out_weight: torch.Tensor
    """(V + 1 + len(durations), Hj) [joint.joint_net.1]: tokens, blank, then TDT durations."""
    out_bias: torch.Tensor
    activation: str
    """The joint's activation before its output layer: relu, tanh or sigmoid."""
    durations: torch.Tensor
    """(n,) int64 TDT durations; empty for a plain RNN-T."""

    @classmethod
    def from_state_dict(
        cls, sd: Mapping[str, torch.Tensor], activation: str, durations: Sequence[int] = (), prefix: str = ""
    ) -> TransducerWeights:
        """From NeMo's `decoder.*` / `joint.*` tensors (a RNNTDecoder + RNNTJoint state dict)."""
        lstm: list[torch.Tensor] = []
        layer = 0
        while f"{prefix}decoder.prediction.dec_rnn.lstm.weight_ih_l{layer}" in sd:
            base = f"{prefix}decoder.prediction.dec_rnn.lstm."
            lstm += [sd[f"{base}{n}_l{layer}"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            layer += 1
        return cls(
            embed=sd[f"{prefix}decoder.prediction.embed.weight"], lstm=tuple(lstm),
            pred_weight=sd[f"{prefix}joint.pred.weight"], pred_bias=sd[f"{prefix}joint.pred.bias"],
            enc_weight=sd[f"{prefix}joint.enc.weight"], enc_bias=sd[f"{prefix}joint.enc.bias"],
            out_weight=sd[f"{prefix}joint.joint_net.1.weight"], out_bias=sd[f"{prefix}joint.joint_net.1.bias"],
            activation=activation, durations=torch.tensor(list(durations), dtype=torch.long),
        )  # fmt: skip

    @classmethod
    def random(
        cls, vocab: int = 64, pred_hidden: int = 32, joint_hidden: int = 48, enc_hidden: int = 40, layers: int = 1,
        activation: str = "relu", durations: Sequence[int] = (), seed: int = 0, blank_bias: float = 10.0,
    ) -> TransducerWeights:  # fmt: skip
        """A generated transducer (tests and benchmarks: no real weights are at hand). `blank_bias`
        raises the blank logit: 10 emits ~0.4 tokens per frame, 0 emits max_symbols on most frames."""
        g = torch.Generator().manual_seed(seed)

        def w(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*shape, generator=g) * scale / max(1, shape[-1]) ** 0.5

        embed = w(vocab + 1, pred_hidden, scale=pred_hidden**0.5)
        embed[vocab] = 0.0  # the padding row: the start symbol embeds to zeros
        lstm: list[torch.Tensor] = []
        for _ in range(layers):
            lstm += [w(4 * pred_hidden, pred_hidden), w(4 * pred_hidden, pred_hidden), w(4 * pred_hidden, scale=0.1),
                     w(4 * pred_hidden, scale=0.1)]  # fmt: skip
        out_bias = w(vocab + 1 + len(durations), scale=0.1)
        out_bias[vocab] += blank_bias
        return cls(
            embed=embed, lstm=tuple(lstm), pred_weight=w(joint_hidden, pred_hidden, scale=2.0),
            pred_bias=w(joint_hidden, scale=0.1), enc_weight=w(joint_hidden, enc_hidden, scale=2.0),
            enc_bias=w(joint_hidden, scale=0.1), out_weight=w(vocab + 1 + len(durations), joint_hidden, scale=2.0),
            out_bias=out_bias, activation=activation, durations=torch.tensor(list(durations), dtype=torch.long),
        )  # fmt: skip

    @property
    def blank(self) -> int:
        return int(self.embed.shape[0]) - 1

    @property
    def layers(self) -> int:
        return len(self.lstm) // 4

    def project(self, enc: torch.Tensor) -> torch.Tensor:
        """Encoder frames (B, T, D) -> the joint's projection (B, T, Hj)."""
        return torch.nn.functional.linear(enc, self.enc_weight, self.enc_bias)

    def predict(
        self, labels: torch.Tensor, h: torch.Tensor | None, c: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """labels (B,) -> the joint's projection of the prediction (B, Hj), and h, c (layers, B, H)."""
        y = torch.nn.functional.embedding(labels, self.embed).unsqueeze(0)  # (1, B, H)
        if h is None or c is None:
            zeros = y.new_zeros(self.layers, y.shape[1], self.embed.shape[1])
            h, c = zeros, zeros.clone()
        g, h, c = torch.lstm(y, (h, c), list(self.lstm), True, self.layers, 0.0, False, False, False)
        return torch.nn.functional.linear(g[0], self.pred_weight, self.pred_bias), h, c

    def initial_state(self, batch: int) -> TransducerDecodeState:
        """After the start symbol (blank), as NeMo's label-looping decoder begins."""
        labels = torch.full((batch,), self.blank, dtype=torch.long, device=self.embed.device)
        pred, h, c = self.predict(labels, None, None)
        zeros = torch.zeros(batch, dtype=torch.long, device=self.embed.device)
        return TransducerDecodeState(h, c, pred, zeros, zeros.clone())


@dataclass
class TransducerDecodeState:
    """Per-row state carried across chunks (NeMo family's TransducerState)."""

    h: torch.Tensor
    """(layers, B, H) LSTM state after the last emitted label."""
    c: torch.Tensor
    pred: torch.Tensor
    """(B, Hj) the joint's projection of the prediction for the last label."""
    time_jump: torch.Tensor
    """(B,) int64: TDT frames to skip at the start of the next chunk (0 for RNN-T)."""
    frames_decoded: torch.Tensor
    """(B,) int64: encoder frames consumed before this chunk (frame indices are absolute)."""


@dataclass
class GreedyOutput:
    tokens: torch.Tensor
    """(B, N) int64, row i valid for counts[i]."""
    frames: torch.Tensor
    """(B, N) int64: absolute encoder frame of each token."""
    logprobs: torch.Tensor
    """(B, N) float32: log P(token) under the joint's softmax over tokens + blank."""
    counts: torch.Tensor
    """(B,) int64."""

    def row(self, i: int) -> tuple[list[int], list[int], list[float]]:
        n = int(self.counts[i])
        return self.tokens[i, :n].tolist(), self.frames[i, :n].tolist(), self.logprobs[i, :n].tolist()


def _joint_step(
    f: torch.Tensor, pred: torch.Tensor, w: TransducerWeights
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One joint evaluation per row -> labels, token log-probs, duration index (TDT)."""
    hidden = getattr(torch, w.activation)(f + pred)
    logits = torch.nn.functional.linear(hidden, w.out_weight, w.out_bias)
    vocab = w.blank + 1
    # NeMo's CPU joint applies log_softmax over every output before the argmax; so do we, so
    # that ties resolve identically.
    full = logits.log_softmax(dim=-1)
    labels = full[:, :vocab].argmax(dim=-1)
    token_lp = logits[:, :vocab].log_softmax(dim=-1).gather(1, labels[:, None])[:, 0]
    duration_idx = full[:, vocab:].argmax(dim=-1) if len(w.durations) else None
    return labels, token_lp, duration_idx


def rnnt_greedy_label_loop_reference(
    f: torch.Tensor, lengths: torch.Tensor, state: TransducerDecodeState, w: TransducerWeights, max_symbols: int
) -> tuple[GreedyOutput, TransducerDecodeState]:
    """Python reference: NeMo's batched label looping over projected frames f (B, T, Hj)."""
    b = f.shape[0]
    rows = torch.arange(b, device=f.device)
    tdt = bool(len(w.durations))
    durations = w.durations.to(f.device)
    time = state.time_jump.clone() if tdt else torch.zeros(b, dtype=torch.long, device=f.device)
    last_t = torch.clamp(lengths - 1, min=0)
    active = time < lengths
    last_nb_time = torch.full((b,), -1, dtype=torch.long, device=f.device)
    last_nb_count = torch.zeros(b, dtype=torch.long, device=f.device)
    h, c, pred = state.h, state.c, state.pred
    emitted: list[tuple[torch.Tensor, ...]] = []
    while bool(active.any()):
        active_before = active.clone()
        labels, scores, dur_idx = _joint_step(f[rows, torch.minimum(time, last_t)], pred, w)
        blank = labels == w.blank
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
            more, more_scores, dur_idx = _joint_step(f[rows, torch.minimum(time, last_t)], pred, w)
            labels = torch.where(advance, more, labels)
            scores = torch.where(advance, more_scores, scores)
            blank = labels == w.blank
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
        new_pred, new_h, new_c = w.predict(labels, h, c)
        keep = found[:, None]
        pred = torch.where(keep, new_pred, pred)
        h = torch.where(keep[None], new_h, h)
        c = torch.where(keep[None], new_c, c)
        force = active & ~blank & (last_nb_count >= max_symbols) & (last_nb_time == time)
        time = time + force
        active = time < lengths
    out = _collect(emitted, b, state.frames_decoded, f.device)
    next_state = TransducerDecodeState(
        h, c, pred, (time - lengths) if tdt else torch.zeros_like(time), state.frames_decoded + lengths
    )
    return out, next_state


def _collect(
    emitted: list[tuple[torch.Tensor, ...]], b: int, offset: torch.Tensor, device: torch.device
) -> GreedyOutput:
    if not emitted:
        empty = torch.zeros(b, 0, dtype=torch.long, device=device)
        return GreedyOutput(empty, empty.clone(), empty.float(), torch.zeros(b, dtype=torch.long, device=device))
    found = torch.stack([e[0] for e in emitted], dim=1)  # (B, steps)
    labels = torch.stack([e[1] for e in emitted], dim=1)
    times = torch.stack([e[2] for e in emitted], dim=1) + offset[:, None]
    scores = torch.stack([e[3] for e in emitted], dim=1).float()
    counts = found.sum(dim=1)
    width = int(counts.max())
    # Stable order: each row's found steps first, in step order.
    order = torch.sort((~found).to(torch.int8), dim=1, stable=True).indices[:, :width]
    valid = torch.arange(width, device=device)[None] < counts[:, None]
    return GreedyOutput(
        labels.gather(1, order).masked_fill(~valid, 0), times.gather(1, order).masked_fill(~valid, 0),
        scores.gather(1, order).masked_fill(~valid, 0.0), counts,
    )  # fmt: skip


def _op_args(
    f: torch.Tensor, lengths: torch.Tensor, state: TransducerDecodeState, w: TransducerWeights, max_symbols: int
) -> tuple[object, ...]:
    return (f, lengths, state.h, state.c, state.pred, state.time_jump, state.frames_decoded, w.embed, list(w.lstm),
            w.pred_weight, w.pred_bias, w.out_weight, w.out_bias, w.durations.to(f.device), w.activation,
            max_symbols)  # fmt: skip


def rnnt_greedy_label_loop(
    f: torch.Tensor, lengths: torch.Tensor, state: TransducerDecodeState, weights: TransducerWeights,
    max_symbols: int, *, use_extension: bool | None = None,
) -> tuple[GreedyOutput, TransducerDecodeState]:  # fmt: skip
    """Decode projected encoder frames f (B, T, Hj) (`weights.project(enc)`), row i valid for
    lengths[i] frames, from `state`; returns the emitted tokens and the next state."""
    if use_extension is None:
        use_extension = kernel_for(f.device)
    if not resolve_use_extension(use_extension):
        with torch.inference_mode():
            return rnnt_greedy_label_loop_reference(f, lengths, state, weights, max_symbols)
    tokens, frames, logprobs, counts, h, c, pred, time_jump, frames_decoded = torch.ops.oasr.rnnt_greedy_label_loop(
        *_op_args(f, lengths, state, weights, max_symbols)
    )
    return GreedyOutput(tokens, frames, logprobs, counts), TransducerDecodeState(h, c, pred, time_jump, frames_decoded)
