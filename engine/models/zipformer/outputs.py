"""A request's greedy hypothesis or beam search -> `RequestOutput` (partial or final): text,
per-token times, words, confidence, log-probabilities, n-best."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.models.zipformer.tokenizer import Tokenizer
from engine.models.zipformer.transducer import GreedyState
from engine.ops.modified_beam import ModifiedBeam
from engine.ops.transducer_beam import BeamHypothesis
from engine.request import Request
from engine.streaming.outputs import final_output, logprob_fields, partial_output
from engine.types import Alternative, FinishReason, RequestOutput


@dataclass(frozen=True)
class OutputBuilder:
    tokenizer: Tokenizer
    frame_seconds: float
    """Seconds per encoder frame (40 ms: 10 ms fbank x 4)."""

    def partial(self, req: Request, hyp: GreedyState, beam: ModifiedBeam | None = None) -> RequestOutput:
        """Greedy tokens never change once emitted: all of the text is committed. Under a beam the
        best hypothesis shows, and the tokens every hypothesis shares are committed."""
        committed = None
        if beam is not None:
            hyp = _as_greedy(beam.hypotheses()[0])
            committed = self.tokenizer.text(beam.stable_tokens())
        text = self.tokenizer.text(hyp.tokens)
        return partial_output(req, text, hyp.tokens, text if committed is None else committed,
                              **self._logprobs(req, hyp))  # fmt: skip

    def final(self, req: Request, hyp: GreedyState, reason: FinishReason, beam: ModifiedBeam | None = None
              ) -> RequestOutput:  # fmt: skip
        nbest: list[Alternative] = []
        if beam is not None:
            ranked = beam.hypotheses(final=True)
            hyp = _as_greedy(ranked[0])
            if req.decoding.beam_size > 1:
                norm = beam.norm_offset  # icefall's length normalisation: tokens + context_size
                nbest = [Alternative(self.tokenizer.text(h.tokens), math.exp(h.score / (len(h.tokens) + norm)))
                         for h in ranked[: req.decoding.n_best]]  # fmt: skip
        text = self.tokenizer.text(hyp.tokens)
        words = (self.tokenizer.words(hyp.tokens, hyp.frames, hyp.logprobs, self.frame_seconds)
                 if req.decoding.word_timestamps else None)  # fmt: skip
        return final_output(req, text, hyp.tokens, reason, logprobs=hyp.logprobs, words=words, nbest=nbest,
                            timestamps=[round(f * self.frame_seconds, 3) for f in hyp.frames],
                            **self._logprobs(req, hyp))  # fmt: skip

    def _logprobs(self, req: Request, hyp: GreedyState) -> dict[str, Any]:
        return logprob_fields(req, hyp.tokens, hyp.logprobs, self.tokenizer.token_bytes)


def _as_greedy(h: BeamHypothesis) -> GreedyState:
    """A beam hypothesis in the greedy hypothesis' shape (what the output builder reads)."""
    return GreedyState(context=[], tokens=h.tokens, frames=h.frames, logprobs=h.logprobs)
