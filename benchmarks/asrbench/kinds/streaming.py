"""streaming: live sessions fed in chunks.

paced    like a live microphone: chunk i is sent when its audio would have been recorded,
         at the ABSOLUTE due time start + min((i+1)·chunk, duration) (no drift); a chunk
         handed over more than `late_ms` after its due time is late (backpressure or a
         starved client), reported as `late_chunk_pct`.
unpaced  all chunks as fast as the transport takes them.

Per session: first_partial_ms (from stream open), final_latency_ms (from the end of audio:
the last due time when paced, the close when unpaced), and the partial cadence (intervals
between partials).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.asrbench.backends.base import Utterance
from benchmarks.asrbench.kinds.base import KindContext, sleep_until

logger = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {"modes": ["paced", "unpaced"], "chunk_ms": [200], "sessions": [1], "rounds": 1,
                            "late_ms": 50.0, "warmup": 1, "timeout_s": 300.0}
"""One point per (mode, chunk_ms, sessions): `sessions` concurrent sessions × `rounds`;
warmup: unpaced sessions before the first point."""


def run_session(ctx: KindContext, utt: Utterance, *, paced: bool, chunk_ms: int, late_ms: float, point: str,
                phase: str, seq: int, timeout_s: float) -> dict[str, Any]:
    chunk = chunk_ms * 16  # samples at 16 kHz
    n_chunks = max(1, -(-len(utt.audio) // chunk))
    late = 0
    max_late = 0.0
    error = None
    text = ""
    start = time.perf_counter()
    end_of_audio = start
    session = None
    try:
        session = ctx.backend.open_stream(utt)
        start = time.perf_counter()
        for i in range(n_chunks):
            due = start + min((i + 1) * chunk, len(utt.audio)) / 16_000
            if paced:
                sleep_until(due)
            sent = time.perf_counter()
            if paced and (sent - due) * 1000.0 > late_ms:
                late += 1
            max_late = max(max_late, (sent - due) * 1000.0) if paced else 0.0
            session.send(utt.audio[i * chunk:(i + 1) * chunk])
        session.close_input()
        end_of_audio = (start + len(utt.audio) / 16_000) if paced else time.perf_counter()
        text = session.result(timeout_s)
    except Exception as exc:  # a failed session is recorded, not raised
        error = f"{type(exc).__name__}: {exc}"
        logger.warning("streaming %s session %d (%s) failed: %s", point, seq, utt.item_id, error)
        if session is not None:
            session.abort()
    partial_times = [round((t - start) * 1000.0, 3) for t, _ in session.partials] if session else []
    final_t = session.final_t if session else None
    record = {
        "benchmark": ctx.benchmark or "streaming", "kind": "streaming", "point": point, "bucket": utt.bucket, "phase": phase, "seq": seq, "item_id": utt.item_id,
        "audio_s": round(utt.duration_s, 4), "paced": paced, "chunk_ms": chunk_ms, "chunks": n_chunks,
        "late_chunks": late, "max_late_ms": round(max_late, 3), "start_ms": ctx.ms(start),
        "end_of_audio_ms": ctx.ms(end_of_audio),
        "first_partial_ms": partial_times[0] if partial_times else None,
        "final_latency_ms": round((final_t - end_of_audio) * 1000.0, 3) if final_t and error is None else None,
        "partial_times_ms": partial_times, "ok": error is None, "error": error, "text": text,
    }
    ctx.recorder.session(record)
    return record


def _point(mode: str, chunk_ms: int, sessions: int, cfg: dict[str, Any]) -> str:
    """`paced`, `paced-s8`, `paced-c320-s8`: a coordinate is named only when the profile sweeps it."""
    name = mode
    if len(cfg["chunk_ms"]) > 1:
        name += f"-c{chunk_ms}"
    return name if sessions == 1 and len(cfg["sessions"]) <= 1 else f"{name}-s{sessions}"


def run(ctx: KindContext, cfg: dict[str, Any]) -> None:
    late_ms, timeout_s = float(cfg["late_ms"]), float(cfg["timeout_s"])
    first_chunk = int(cfg["chunk_ms"][0])
    warm = ctx.utterances(ctx.warmup_count(cfg, max(int(s) for s in cfg["sessions"])))
    for w, utt in enumerate(warm):
        run_session(ctx, utt, paced=False, chunk_ms=first_chunk, late_ms=late_ms, point="warmup", phase="warmup",
                    seq=w, timeout_s=timeout_s)
    for mode in cfg["modes"]:
        if mode not in ("paced", "unpaced"):
            raise ValueError(f"streaming mode must be 'paced' or 'unpaced', got {mode!r}")
        for chunk_ms in (int(c) for c in cfg["chunk_ms"]):
            for sessions in (int(s) for s in cfg["sessions"]):
                point = _point(mode, chunk_ms, sessions, cfg)
                utts = ctx.utterances(sessions * int(cfg["rounds"]))
                with ThreadPoolExecutor(max_workers=sessions, thread_name_prefix="stream") as pool:
                    list(pool.map(lambda su, m=mode, p=point, c=chunk_ms: run_session(
                        ctx, su[1], paced=(m == "paced"), chunk_ms=c, late_ms=late_ms, point=p, phase="measure",
                        seq=su[0], timeout_s=timeout_s), enumerate(utts)))
