"""A request's recognised pieces -> its final `RequestOutput`: text and words by FunASR's
post-processing, token start times and word spans from the CIF, log-probabilities."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.models.paraformer.model import Recognized
from engine.models.paraformer.spelling import Spelling
from engine.models.paraformer.timestamps import token_spans
from engine.request import Request
from engine.streaming.outputs import final_output as finished_output
from engine.streaming.outputs import logprob_fields
from engine.types import RequestOutput, Word


@dataclass(eq=False)
class Piece:
    """A stretch of one request's audio recognised as one batch row."""

    request: Request
    offset: int
    """First sample of the piece in the request's audio."""
    audio: np.ndarray


def final_output(req: Request, pieces: list[tuple[Piece, Recognized]], spelling: Spelling,
                 frame_seconds: float) -> RequestOutput:  # fmt: skip
    tokens: list[int] = []
    logprobs: list[float] = []
    spans: list[tuple[int, int]] = []
    for piece, rec in pieces:
        offset_ms = round(piece.offset * 1000 / req.sample_rate)
        got = token_spans(rec.alphas, rec.fires, len(rec.tokens), frame_seconds) if rec.tokens else []
        # FunASR gives fewer spans than tokens when the fires run out: the rest share the last end
        last = got[-1][1] if got else 0
        got += [(last, last)] * (len(rec.tokens) - len(got))
        spans += [(a + offset_ms, b + offset_ms) for a, b in got]
        tokens += rec.tokens
        logprobs += rec.logprobs
    opts = req.decoding
    words = spelling.words(tokens, spans)
    word_list = None
    if opts.word_timestamps:
        word_list = [
            Word(word=w, start=a / 1000, end=b / 1000,
                 confidence=sum(math.exp(logprobs[k]) for k in g) / len(g) if g else 0.0)
            for w, g, (a, b) in zip(words.words, words.groups, words.spans or [], strict=False)
        ]  # fmt: skip
    return finished_output(req, words.text, tokens, "stop", logprobs=logprobs, words=word_list,
                           timestamps=[a / 1000 for a, _ in spans],
                           **logprob_fields(req, tokens, logprobs, spelling.token_bytes))  # fmt: skip
