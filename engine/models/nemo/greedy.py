"""Batched greedy transducer decoding (RNN-T and TDT) for the NeMo family: the engine's
`rnnt_greedy_label_loop` operator (engine/ops/rnnt.py: NeMo's label-looping algorithm, compiled in
`engine._C` or run as its Python reference) over this model's prediction network and joint.

`greedy_label_looping(net, enc, lengths, state, max_symbols)`: encoder frames (B, T, D), their
lengths and a decoding state in; tokens, their absolute frames and log-probs per row, and the next
state, out. Ties go to the lower id, as `torch.max` does in NeMo.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.models.nemo.transducer import Transducer, TransducerState
from engine.ops import TransducerDecodeState, TransducerWeights, rnnt_greedy_label_loop


@dataclass
class GreedyResult:
    tokens: list[list[int]]
    frames: list[list[int]]
    """Absolute encoder frame of each token (chunk offset + frame within the chunk)."""
    logprobs: list[list[float]]
    """log P(token) under the joint's softmax over tokens + blank at the emitting step."""


def operator_weights(net: Transducer) -> TransducerWeights:
    """The transducer's tensors in the operator's layout (built once per model; they share storage)."""
    weights: TransducerWeights | None = getattr(net, "_operator_weights", None)
    if weights is None:
        weights = TransducerWeights.from_state_dict(net.state_dict(), net.cfg.activation, net.cfg.durations or ())
        net._operator_weights = weights  # type: ignore[assignment]
    return weights


@torch.inference_mode()
def greedy_label_looping(
    net: Transducer, enc: torch.Tensor, lengths: torch.Tensor, state: TransducerState, max_symbols: int
) -> tuple[GreedyResult, TransducerState]:
    weights = operator_weights(net)
    start = TransducerDecodeState(state.h, state.c, state.pred, state.time_jump, state.frames_decoded)
    out, nxt = rnnt_greedy_label_loop(weights.project(enc), lengths, start, weights, max_symbols)
    rows = [out.row(i) for i in range(enc.shape[0])]
    result = GreedyResult([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    return result, TransducerState(nxt.h, nxt.c, nxt.pred, nxt.time_jump, nxt.frames_decoded)
