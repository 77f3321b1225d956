"""longform: `single` over long recordings, warmed on the shortest item; one point per item
(e.g. `long60s_00`), so speed and WER are reported per recording.

Reported unsupported when the backend bounds input length, unless `allow_bounded: true`."""

from __future__ import annotations

from typing import Any

from benchmarks.asrbench.kinds.base import KindContext, timed_request

DEFAULTS: dict[str, Any] = {"warmup": 1, "repetitions": 1, "allow_bounded": False}


def run(ctx: KindContext, cfg: dict[str, Any]) -> None:
    fn = ctx.backend.transcribe
    utts = ctx.utterances()
    shortest = sorted(utts, key=lambda u: u.duration_s)
    for seq, utt in enumerate(shortest[: ctx.warmup_count(cfg, len(utts))]):
        timed_request(ctx, fn, utt, kind="longform", point=utt.item_id, phase="warmup", seq=seq)
    for rep in range(int(cfg["repetitions"])):
        for seq, utt in enumerate(utts):
            timed_request(ctx, fn, utt, kind="longform", point=utt.item_id, phase="measure", seq=seq, repeat=rep)
