"""longform: each long clip (joined consecutive clips, exact transcript) as one request.

One point per clip (e.g. `long_60s`), so speed and WER are reported per length.
"""

from __future__ import annotations

from typing import Any

from benchmarks.asrbench.kinds.base import KindContext, timed_request

DEFAULTS = {"dataset": "longform-speech", "warmup": 0, "repeats": 1}


def run(ctx: KindContext, cfg: dict[str, Any]) -> None:
    fn = ctx.backend.transcribe
    utts = ctx.utterances(len(ctx.dataset.items))
    for seq, utt in enumerate(utts[: int(cfg["warmup"])]):
        timed_request(ctx, fn, utt, kind="longform", point=utt.item_id, phase="warmup", seq=seq)
    for rep in range(int(cfg["repeats"])):
        for seq, utt in enumerate(utts):
            timed_request(ctx, fn, utt, kind="longform", point=utt.item_id, phase="measure", seq=seq, repeat=rep)
