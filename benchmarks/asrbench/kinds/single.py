"""single: one request in flight at a time; `repetitions` passes over the workload's items."""

from __future__ import annotations

from typing import Any

from benchmarks.asrbench.kinds.base import KindContext, timed_request

DEFAULTS: dict[str, Any] = {"warmup": "all", "repetitions": 1}


def run(ctx: KindContext, cfg: dict[str, Any], kind: str = "single") -> None:
    fn = ctx.backend.transcribe
    utts = ctx.utterances()
    for seq, utt in enumerate(ctx.utterances(ctx.warmup_count(cfg, len(utts)))):
        timed_request(ctx, fn, utt, kind=kind, point="default", phase="warmup", seq=seq)
    for rep in range(int(cfg["repetitions"])):
        for seq, utt in enumerate(utts):
            timed_request(ctx, fn, utt, kind=kind, point="default", phase="measure", seq=seq, repeat=rep)
