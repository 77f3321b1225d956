"""batch: one NATIVE batch call of exactly B inputs per batch (never emulated by concurrency).

The workload is cycled to fill whole batches: each repetition is ceil(items / B) batches.
Every request of a batch is recorded with the batch's timing and a shared `batch_seq`; the
summary counts each batch once. A width the backend cannot serve fails; it is never reduced.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from benchmarks.asrbench.kinds.base import KindContext

logger = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {"batch_sizes": [1, 4], "repetitions": 1, "warmup": 1}
"""`warmup`: batches per size before the measured ones (`all` = one full pass)."""


def _one_batch(ctx: KindContext, size: int, offset: int, phase: str, batch_seq: int) -> None:
    utts = ctx.utterances(size, offset=offset)
    send = time.perf_counter()
    try:
        texts, ok, error = ctx.backend.transcribe_batch(utts), True, None
        if len(texts) != len(utts):
            texts, ok, error = [""] * len(utts), False, f"backend returned {len(texts)} texts for {len(utts)}"
    except Exception as exc:  # recorded, not raised: a failed batch is a data point
        texts, ok, error = [""] * len(utts), False, f"{type(exc).__name__}: {exc}"
        logger.warning("batch of %d failed: %s", size, error)
    done = time.perf_counter()
    for k, (utt, text) in enumerate(zip(utts, texts, strict=True)):
        ctx.recorder.request({
            "benchmark": ctx.benchmark or "batch", "kind": "batch", "point": f"bs{size}", "bucket": utt.bucket, "phase": phase, "seq": batch_seq * size + k,
            "batch_seq": batch_seq, "batch_size": size, "item_id": utt.item_id,
            "audio_s": round(utt.duration_s, 4), "sched_ms": ctx.ms(send), "send_ms": ctx.ms(send),
            "done_ms": ctx.ms(done), "latency_ms": round((done - send) * 1000.0, 3), "send_lag_ms": 0.0,
            "ok": ok, "error": error, "text": text,
        })


def run(ctx: KindContext, cfg: dict[str, Any]) -> None:
    items = len(ctx.workload.items)
    for size in cfg["batch_sizes"]:
        size = int(size)
        per_pass = -(-items // size)
        for w in range(ctx.warmup_count(cfg, per_pass)):
            _one_batch(ctx, size, offset=w * size, phase="warmup", batch_seq=w)
        seq = 0
        for _rep in range(int(cfg["repetitions"])):
            for b in range(per_pass):
                _one_batch(ctx, size, offset=b * size, phase="measure", batch_seq=seq)
                seq += 1
