"""The Zipformer transducer as the beam searches see it (`engine.ops.transducer_beam.TransducerNet`)
and one request's search: icefall's modified beam search (engine/ops/modified_beam.py) with
icefall's ContextGraph keyword biasing.

The stateless predictor's state is the hypothesis' last `context_size` tokens (-1 pads a short
history) and the joiner's projection of the prediction for them; the joiner's log-probs are
log-softmax of its logits, as icefall's search takes them.
"""

from __future__ import annotations

import torch

from engine.models.zipformer.transducer import Joiner, Predictor
from engine.ops.context_graph import ContextGraph
from engine.ops.modified_beam import ModifiedBeam
from engine.ops.transducer_beam import PredictorState

KEYWORD_BEAM = 4
"""Hypotheses of a greedy request that names keywords: biasing needs alternatives to promote."""


class ZipformerNet:
    """Predictor + Joiner as a `TransducerNet`."""

    def __init__(self, predictor: Predictor, joiner: Joiner) -> None:
        self.predictor, self.joiner = predictor, joiner

    @property
    def blank(self) -> int:
        return self.predictor.blank_id

    @property
    def context_size(self) -> int:
        return self.predictor.context_size

    def project(self, enc: torch.Tensor) -> torch.Tensor:
        return self.joiner.project_encoder(enc)

    def start(self, rows: int) -> PredictorState:
        device = self.predictor.embedding.weight.device
        context = torch.tensor([self.predictor.start_context()] * rows, dtype=torch.long, device=device)
        return context, self.joiner.project_decoder(self.predictor.predict(context))

    def step(self, labels: torch.Tensor, state: PredictorState) -> PredictorState:
        context = torch.cat([state[0][:, 1:], labels[:, None].to(state[0])], dim=1)
        return context, self.joiner.project_decoder(self.predictor.predict(context))

    def log_probs(self, frames: torch.Tensor, state: PredictorState) -> torch.Tensor:
        return self.joiner.join(frames, state[1]).log_softmax(dim=-1)


def new_beam(net: ZipformerNet, beam_size: int, keywords: list[list[int]], boost: float) -> ModifiedBeam:
    """A request's search: `beam_size` hypotheses (at least KEYWORD_BEAM with keywords)."""
    graph = ContextGraph.from_keywords(keywords, boost) if keywords and boost > 0 else None
    beam = max(beam_size, KEYWORD_BEAM) if graph is not None else beam_size
    with torch.inference_mode():
        return ModifiedBeam.initial(net, beam, net.context_size, graph)
