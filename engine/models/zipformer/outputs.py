"""A request's greedy hypothesis -> `RequestOutput` (partial or final): text, per-token times,
words, confidence, log-probabilities."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.models.zipformer.tokenizer import Tokenizer
from engine.models.zipformer.transducer import GreedyState
from engine.request import Request
from engine.types import FinishReason, RequestOutput, Segment


@dataclass(frozen=True)
class OutputBuilder:
    tokenizer: Tokenizer
    frame_seconds: float
    """Seconds per encoder frame (40 ms: 10 ms fbank x 4)."""

    def partial(self, req: Request, hyp: GreedyState) -> RequestOutput:
        """Greedy tokens never change once emitted: all of the text is committed."""
        text = self.tokenizer.text(hyp.tokens)
        return RequestOutput(request_id=req.request_id, text=text, tokens=list(hyp.tokens), committed=text,
                             duration=req.duration, **self._logprobs(req, hyp))  # fmt: skip

    def final(self, req: Request, hyp: GreedyState, reason: FinishReason) -> RequestOutput:
        text = self.tokenizer.text(hyp.tokens)
        mean_lp = sum(hyp.logprobs) / len(hyp.logprobs) if hyp.logprobs else 0.0
        words = (self.tokenizer.words(hyp.tokens, hyp.frames, hyp.logprobs, self.frame_seconds)
                 if req.decoding.word_timestamps else None)  # fmt: skip
        return RequestOutput(
            request_id=req.request_id, text=text, tokens=list(hyp.tokens), finished=True, finish_reason=reason,
            words=words,
            segments=[Segment(id=0, start=0.0, end=req.duration, text=text, tokens=list(hyp.tokens),
                              avg_logprob=mean_lp)],
            duration=req.duration, committed=text, confidence=math.exp(mean_lp) if hyp.logprobs else None,
            timestamps=[round(f * self.frame_seconds, 3) for f in hyp.frames], **self._logprobs(req, hyp),
        )  # fmt: skip

    def _logprobs(self, req: Request, hyp: GreedyState) -> dict[str, Any]:
        if not req.decoding.logprobs:
            return {}
        return {"token_logprobs": list(hyp.logprobs), "token_bytes": self.tokenizer.token_bytes(hyp.tokens)}


def error_output(req: Request, stage: str, message: str) -> RequestOutput:
    return RequestOutput(request_id=req.request_id, finished=True, finish_reason="error", error=message,
                         error_stage=stage, duration=req.duration)  # fmt: skip
