"""Engine CPU per live pass, without wall-clock noise: N live Whisper streams fed in lockstep.

Every tick feeds each session `--tick-ms` of its audio (the session audio of
benchmarks/streaming_capacity.py: three dev clips joined by pauses) and steps the engine until
it is idle, so every stream gets every pass its cadence asks for and the passes do not depend on
the machine's load: two runs of the same code give the same partials and finals. Reported: the
engine's CPU time (`time.process_time` around `engine.step`, one torch thread by default), in
all and per pass; the engine's stage timers (host seconds); how many partials changed the text
(what a realtime session sends as a delta); the live WER; and a digest of every partial and
final. An A/B of a speed change: run old and new alternately in separate processes; equal
digests mean identical transcripts.

    python -m benchmarks.streaming_cpu --sessions 8
    python -m benchmarks.streaming_cpu --sessions 16 --threads 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time

import numpy as np

from benchmarks.streaming_capacity import SAMPLE_RATE, corpus_wer, sessions_audio
from engine import ASREngine, EngineConfig


def run(sessions: int, tick_ms: int, threads: int) -> dict[str, object]:
    engine = ASREngine(EngineConfig(service_mode="streaming", num_threads=threads))  # sets torch's threads
    engine.transcribe_outputs(np.zeros(SAMPLE_RATE, dtype=np.float32))  # warm-up, not counted
    engine.metrics.drain()
    audios, texts = sessions_audio(sessions)
    rids = [engine.add_streaming_request() for _ in audios]
    partials: dict[str, list[str]] = {rid: [] for rid in rids}
    finals: dict[str, str] = {}
    stages: dict[str, float] = {}
    cpu = 0.0

    def drain() -> None:
        nonlocal cpu
        while engine.has_work():
            start = time.process_time()
            outputs = engine.step()
            cpu += time.process_time() - start
            for stage, times in engine.metrics.drain().stage_seconds.items():
                stages[stage] = stages.get(stage, 0.0) + sum(times)
            for out in outputs:
                if out.finished:
                    finals[out.request_id] = out.text
                else:
                    partials[out.request_id].append(out.text)

    tick = SAMPLE_RATE * tick_ms // 1000
    for offset in range(0, max(a.size for a in audios), tick):
        for rid, audio in zip(rids, audios):
            if offset < audio.size:
                engine.feed_chunk(rid, audio[offset : offset + tick], is_last=offset + tick >= audio.size)
        while not engine.has_work() and len(finals) < len(rids):
            time.sleep(0.001)  # the feeds reach the engine's inbox
        drain()
    while len(finals) < len(rids):
        time.sleep(0.001)
        drain()
    engine.shutdown()
    passes = sum(map(len, partials.values())) + len(finals)
    changed = sum(sum(1 for a, b in zip(["", *texts_], texts_) if a != b) for texts_ in partials.values())
    digest = hashlib.sha256(json.dumps([[partials[r], finals[r]] for r in rids]).encode()).hexdigest()[:12]
    return {
        "sessions": sessions,
        "audio_s": round(sum(a.size for a in audios) / SAMPLE_RATE, 1),
        "passes": passes,
        "partials_changing_text": changed,
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_pass": round(1000 * cpu / passes, 1),
        "stage_s": {k: round(v, 2) for k, v in sorted(stages.items(), key=lambda kv: -kv[1]) if v >= 0.01},
        "live_wer": corpus_wer(texts, [finals[r] for r in rids]),
        "digest": digest,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--tick-ms", type=int, default=500, help="audio fed to every session per tick")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(run(args.sessions, args.tick_ms, args.threads)), flush=True)


if __name__ == "__main__":
    main()
