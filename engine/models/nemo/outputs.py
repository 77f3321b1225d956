"""A request's decoded tokens -> `RequestOutput` (partial or final): text, per-token times, words,
confidence, log-probs, n-best."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.models.nemo.ctc import CtcDecoder
from engine.models.nemo.tokenizer import Tokenizer
from engine.ops.malsd import MalsdBeam
from engine.ops.transducer_beam import BeamHypothesis
from engine.request import Request
from engine.streaming.outputs import final_output, logprob_fields, partial_output
from engine.types import Alternative, FinishReason, RequestOutput


@dataclass
class Hypothesis:
    """Greedy transducer tokens accumulated across chunks (committed: they never change)."""

    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def extend(self, tokens: list[int], frames: list[int], logprobs: list[float]) -> None:
        self.tokens += tokens
        self.frames += frames
        self.logprobs += logprobs


@dataclass(frozen=True)
class OutputBuilder:
    tokenizer: Tokenizer
    frame_seconds: float
    """Seconds per encoder frame (hop x subsampling factor: 80 ms at 10 ms x 8)."""

    def partial(
        self, req: Request, hyp: Hypothesis | None, ctc: CtcDecoder | None, tentative: Hypothesis | None = None,
        beam: MalsdBeam | None = None,
    ) -> RequestOutput:  # fmt: skip
        """`tentative`: tokens decoded past the committed ones (a buffered stream's right context),
        shown after the committed text and revised by later steps. Under a beam the committed
        tokens are those every live hypothesis shares."""
        tokens, _, logprobs = _best(hyp, ctc, beam)
        stable = ctc.stable_tokens() if ctc is not None else beam.stable_tokens() if beam is not None else tokens
        committed = self.tokenizer.text(stable)
        if tentative is not None and tentative.tokens:
            with_tentative = self.tokenizer.text(tokens + tentative.tokens)
            if with_tentative.startswith(committed):  # else (a byte-fallback piece split) show committed only
                tokens, logprobs = tokens + tentative.tokens, logprobs + tentative.logprobs
        text = self.tokenizer.text(tokens)
        return partial_output(req, text, tokens, committed,
                              **logprob_fields(req, tokens, logprobs, self.tokenizer.token_bytes))  # fmt: skip

    def final(
        self, req: Request, hyp: Hypothesis | None, ctc: CtcDecoder | None, reason: FinishReason,
        beam: MalsdBeam | None = None,
    ) -> RequestOutput:  # fmt: skip
        ranked = beam.hypotheses(final=True) if beam is not None else None
        tokens, frames, logprobs = _best(hyp, ctc, None, ranked)
        text = self.tokenizer.text(tokens)
        opts = req.decoding
        nbest = []
        if ctc is not None and opts.beam_size > 1:
            nbest = [Alternative(self.tokenizer.text(t), conf) for t, conf in ctc.nbest(opts.n_best)]
        elif ranked and opts.beam_size > 1:
            nbest = [Alternative(self.tokenizer.text(h.tokens), _confidence(h)) for h in ranked[: opts.n_best]]
        words = self.tokenizer.words(tokens, frames, logprobs, self.frame_seconds) if opts.word_timestamps else None
        return final_output(
            req, text, tokens, reason, logprobs=logprobs, words=words, nbest=nbest,
            timestamps=[round(f * self.frame_seconds, 3) for f in frames],
            **logprob_fields(req, tokens, logprobs, self.tokenizer.token_bytes),
        )  # fmt: skip


def _best(
    hyp: Hypothesis | None, ctc: CtcDecoder | None, beam: MalsdBeam | None = None,
    ranked: list[BeamHypothesis] | None = None,
) -> tuple[list[int], list[int], list[float]]:  # fmt: skip
    if ctc is not None:
        return ctc.best()
    if ranked is None and beam is not None:
        ranked = beam.hypotheses()
    if ranked is not None:
        best = ranked[0] if ranked else BeamHypothesis()
        return best.tokens, best.frames, best.logprobs
    assert hyp is not None
    return hyp.tokens, hyp.frames, hyp.logprobs


def _confidence(h: BeamHypothesis) -> float:
    """exp(log P / (tokens + 1)): the search's own length normalisation (NeMo's score_norm)."""
    return math.exp(h.score / (len(h.tokens) + 1))
