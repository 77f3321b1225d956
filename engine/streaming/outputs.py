"""The `RequestOutput` shapes a token-decoding family reports: a stream's partial (committed prefix
+ tentative rest) and a one-segment final. Families compute text, tokens and scores; these
functions fill the fields every family fills the same way."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from engine.request import Request
from engine.types import FinishReason, RequestOutput, Segment

__all__ = ["final_output", "logprob_fields", "partial_output"]


def partial_output(req: Request, text: str, tokens: Sequence[int], committed: str, **fields: Any) -> RequestOutput:
    """A partial whose `committed` text never changes; the rest of `text` is tentative. A
    `committed` that is not a prefix of `text` (the detokenizer split a piece differently) commits
    nothing, so committed text is never taken back."""
    if not text.startswith(committed):
        committed = ""
    return RequestOutput(request_id=req.request_id, text=text, tokens=list(tokens), committed=committed,
                         tentative=text[len(committed) :], duration=req.duration, **fields)  # fmt: skip


def final_output(
    req: Request, text: str, tokens: Sequence[int], reason: FinishReason, *, logprobs: Sequence[float] = (),
    avg_logprob: float | None = None, **fields: Any,
) -> RequestOutput:  # fmt: skip
    """The finished output: all of `text` committed, one segment over the whole request.
    `avg_logprob` defaults to the mean of the tokens' `logprobs`, and `confidence` is its exp
    when there are any (a family without per-token scores passes its own average)."""
    mean = sum(logprobs) / len(logprobs) if logprobs else 0.0
    segment = Segment(id=0, start=0.0, end=req.duration, text=text, tokens=list(tokens),
                      avg_logprob=mean if avg_logprob is None else avg_logprob)  # fmt: skip
    return RequestOutput(
        request_id=req.request_id, text=text, tokens=list(tokens), finished=True, finish_reason=reason,
        segments=[segment], duration=req.duration, committed=text,
        confidence=math.exp(mean) if logprobs else None, **fields,
    )  # fmt: skip


def logprob_fields(
    req: Request, tokens: Sequence[int], logprobs: Sequence[float], token_bytes: Callable[[list[int]], list[bytes]]
) -> dict[str, Any]:
    """`token_logprobs` and `token_bytes` when the request asks for log-probabilities, else nothing."""
    if not req.decoding.logprobs:
        return {}
    return {"token_logprobs": list(logprobs), "token_bytes": token_bytes(list(tokens))}
