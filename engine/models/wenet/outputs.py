"""A WeNet stream's CTC search -> `RequestOutput` (partial or final): text, committed prefix,
words, n-best, with the final n-best reordered by attention rescoring when the model has a
decoder and the engine serves `attention_rescoring`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.ctc_prefix import CTCState
from engine.models.wenet.checkpoint import WenetCheckpoint
from engine.models.wenet.ctc import Detokenizer
from engine.models.wenet.decoder import rescore
from engine.request import Request
from engine.types import FinishReason, RequestOutput, Segment


@dataclass(frozen=True)
class OutputBuilder:
    ckpt: WenetCheckpoint
    detok: Detokenizer
    frame_seconds: float
    """Seconds per encoder frame (frame shift x subsampling)."""
    ctc_weight: float
    """Weight of the CTC score beside the attention decoder's in rescoring."""

    def partial(self, req: Request, ctc: CTCState) -> RequestOutput:
        hyp = ctc.best()
        text = self.detok.text(hyp.tokens)
        committed = self.detok.text(ctc.stable_tokens())
        if not text.startswith(committed):  # detokenization is prefix-stable; guard anyway
            committed = ""
        return RequestOutput(
            request_id=req.request_id,
            text=text,
            tokens=list(hyp.tokens),
            committed=committed,
            tentative=text[len(committed) :],
            duration=req.duration,
        )

    def rescore(self, ctc: CTCState, encoder_out: list[torch.Tensor] | None) -> None:
        """Reorder the CTC n-best by attention rescoring against the whole encoder output."""
        hyps = [h for h in ctc.beams if h.tokens]
        if not encoder_out or len(hyps) < 2 or self.ckpt.decoder is None:
            return
        scores = rescore(  # the CTC side includes the bonus of completed keywords (WeNet's total score)
            self.ckpt.decoder, torch.cat(encoder_out), [h.tokens for h in hyps],
            [h.score + h.context_score for h in hyps],
            sos=self.ckpt.sos, eos=self.ckpt.eos, ctc_weight=self.ctc_weight,
            reverse_weight=self.ckpt.reverse_weight,
        )  # fmt: skip
        ranked = [h for _, h in sorted(zip(scores, hyps, strict=True), key=lambda sh: -sh[0])]
        ctc.beams = ranked + [h for h in ctc.beams if not h.tokens]

    def final(self, req: Request, ctc: CTCState, reason: FinishReason) -> RequestOutput:
        """The finished search's best hypothesis (call `ctc.finalize()` and `rescore` first)."""
        hyp = ctc.best()
        text = self.detok.text(hyp.tokens)
        opts = req.decoding
        duration = req.duration
        avg_logprob = hyp.score / ctc.frames if ctc.frames else 0.0
        return RequestOutput(
            request_id=req.request_id,
            text=text,
            tokens=list(hyp.tokens),
            finished=True,
            finish_reason=reason,
            words=self.detok.words(hyp, self.frame_seconds) if opts.word_timestamps else None,
            segments=[
                Segment(
                    id=0, start=0.0, end=duration, text=text, tokens=list(hyp.tokens), avg_logprob=avg_logprob
                )
            ],
            nbest=self.detok.nbest(ctc, opts.n_best),
            duration=duration,
            committed=text,
        )
