"""single: one request at a time, sequentially; latency of an idle system and its RTFx."""

from __future__ import annotations

from typing import Any

from benchmarks.asrbench.kinds.base import KindContext, timed_request

DEFAULTS = {"warmup": 1, "requests": 6}


def run(ctx: KindContext, cfg: dict[str, Any]) -> None:
    fn = ctx.backend.transcribe
    for seq, utt in enumerate(ctx.utterances(int(cfg["warmup"]))):
        timed_request(ctx, fn, utt, kind="single", point="default", phase="warmup", seq=seq)
    for seq, utt in enumerate(ctx.utterances(int(cfg["requests"]))):
        timed_request(ctx, fn, utt, kind="single", point="default", phase="measure", seq=seq)
