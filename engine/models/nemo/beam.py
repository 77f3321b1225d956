"""The NeMo transducer as the beam searches see it (`engine.ops.transducer_beam.TransducerNet`),
and one request's beam search state.

The predictor state of a hypothesis is its LSTM (h, c) and the joint's projection of its last
prediction; rows are hypotheses. The joint's log-probs follow NeMo on the device: on CPU NeMo's
joint already returns log-softmax outputs (over tokens, blank and TDT durations together) and
`malsd_batch` normalises them again (tokens + blank, and durations, apart), so the CPU path does
both (identical in exact arithmetic; the same rounding as NeMo's scores).
"""

from __future__ import annotations

import torch

from engine.ops import TransducerWeights
from engine.ops.context_graph import ContextGraph
from engine.ops.malsd import MalsdBeam
from engine.ops.transducer_beam import PredictorState

KEYWORD_BEAM = 4
"""Beam of a greedy request that names keywords: biasing needs alternatives to promote."""


class NemoTransducerNet:
    """TransducerWeights (NeMo's RNNTDecoder + RNNTJoint tensors) as a `TransducerNet`."""

    def __init__(self, weights: TransducerWeights) -> None:
        self.weights = weights
        self._start = weights.initial_state(1)

    @property
    def durations(self) -> torch.Tensor | None:
        """(D,) int64 TDT duration choices; None for an RNN-T."""
        return self.weights.durations if len(self.weights.durations) else None

    @property
    def blank(self) -> int:
        return self.weights.blank

    def project(self, enc: torch.Tensor) -> torch.Tensor:
        return self.weights.project(enc)

    def start(self, rows: int) -> PredictorState:
        s = self._start
        return (s.h.transpose(0, 1).repeat(rows, 1, 1), s.c.transpose(0, 1).repeat(rows, 1, 1), s.pred.repeat(rows, 1))

    def step(self, labels: torch.Tensor, state: PredictorState) -> PredictorState:
        h, c = state[0].transpose(0, 1).contiguous(), state[1].transpose(0, 1).contiguous()
        pred, h, c = self.weights.predict(labels, h, c)
        return h.transpose(0, 1), c.transpose(0, 1), pred

    def _joint(self, frames: torch.Tensor, state: PredictorState) -> torch.Tensor:
        w = self.weights
        out = torch.nn.functional.linear(getattr(torch, w.activation)(frames + state[2]), w.out_weight, w.out_bias)
        return out if out.is_cuda else out.log_softmax(dim=-1)

    def log_probs(self, frames: torch.Tensor, state: PredictorState) -> torch.Tensor:
        return self._joint(frames, state)[:, : self.blank + 1].log_softmax(dim=-1)

    def tdt_log_probs(self, frames: torch.Tensor, state: PredictorState) -> tuple[torch.Tensor, torch.Tensor]:
        out = self._joint(frames, state)
        return out[:, : self.blank + 1].log_softmax(dim=-1), out[:, self.blank + 1 :].log_softmax(dim=-1)


def new_beam(net: NemoTransducerNet, beam_size: int, keywords: list[list[int]], boost: float) -> MalsdBeam:
    """A request's search: `beam_size` hypotheses (at least KEYWORD_BEAM with keywords)."""
    graph = ContextGraph.from_keywords(keywords, boost) if keywords and boost > 0 else None
    beam = max(beam_size, KEYWORD_BEAM) if graph is not None else beam_size
    with torch.inference_mode():
        return MalsdBeam.initial(net, beam, graph, tdt=net.durations is not None)
