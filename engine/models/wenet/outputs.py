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
from engine.streaming.outputs import final_output, partial_output
from engine.types import FinishReason, RequestOutput


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
        return partial_output(req, self.detok.text(hyp.tokens), hyp.tokens, self.detok.text(ctc.stable_tokens()))

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
        opts = req.decoding
        return final_output(  # the search's score per frame: CTC has no per-token log-probabilities
            req, self.detok.text(hyp.tokens), hyp.tokens, reason, avg_logprob=hyp.score / ctc.frames if ctc.frames else 0.0,
            words=self.detok.words(hyp, self.frame_seconds) if opts.word_timestamps else None,
            nbest=self.detok.nbest(ctc, opts.n_best),
        )  # fmt: skip
