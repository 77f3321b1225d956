"""Does a live Whisper stream lose words when it is handed audio faster than real time? (issue 43)

One long recording (at least --minutes, default 9): the single-talker dev clips with a reference,
in a seeded shuffle per round, joined by 1 s pauses, rounds repeated until it is long enough.
It is transcribed by the engine API in each mode, with one engine (quantization pinned):

    offline   transcribe_offline (the baseline)
    attached  transcribe(streaming=True): the engine releases the recording one stream step per
              engine step, as if it arrived live to a loaded engine (the issue's 48.8 % WER row)
    burst     a live stream fed the whole recording in one chunk, then stepped until its final
    paced     a live stream fed one --tick-ms chunk per simulated tick, the engine stepped until
              idle after each (a server that keeps up; no wall-clock pacing)

Reported per mode: WER against the joined references (Whisper's English normaliser), the gap to
offline in points, engine steps, wall seconds and wall as a ratio to offline (same run; timings
on a shared machine are noisy, the ratio and the steps less so), and the peak window (s) of the
stream. Run it under the benchmark lock:

    flock /tmp/oasr-bench.lock python -m benchmarks.live_catchup
    flock /tmp/oasr-bench.lock python -m benchmarks.live_catchup --modes offline,burst --minutes 3
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.asrbench.engine_bench.measure import StepClock, step_until_idle
from benchmarks.asrbench.stats import wer
from benchmarks.session_coverage import DATA, SAMPLE_RATE, _manifest, load
from engine import ASREngine, EngineConfig, RequestOutput
from engine.loop import drive

PAUSE_S = 1.0
MODES = ("offline", "attached", "burst", "paced")


def recording(minutes: float, seed: int = 0, data: Path = DATA) -> tuple[np.ndarray, str]:
    """The long recording and its reference text."""
    rows = {cid: r for cid, r in _manifest(data).items() if r.get("text") and not r.get("flags")}
    clips = {cid: load(cid, data) for cid in rows}
    order: list[str] = []
    rng = random.Random(seed)
    total = 0.0
    while total < minutes * 60:
        batch = sorted(rows)
        rng.shuffle(batch)
        for cid in batch:
            order.append(cid)
            total += clips[cid].size / SAMPLE_RATE + PAUSE_S
    pause = np.zeros(int(PAUSE_S * SAMPLE_RATE), np.float32)
    audio = np.concatenate([piece for cid in order for piece in (clips[cid], pause)])
    return audio, " ".join(str(rows[cid]["text"]) for cid in order)


def _drive(engine: ASREngine, rid: str, feed: Callable[[], bool]) -> tuple[RequestOutput, int, float]:
    """Feed by `feed` (False once all is fed) and step until idle after each feed (engine/loop.py);
    the final output, the steps taken and the stream's longest window (s)."""
    clock = StepClock(engine)
    final: RequestOutput | None = None
    peak = 0.0

    def deliver(outs: list[RequestOutput]) -> None:
        nonlocal final, peak
        final = next((o for o in outs if o.request_id == rid and o.finished), final)
        stream = engine.runner.streams.get(rid)  # type: ignore[attr-defined]
        if stream is not None:
            peak = max(peak, stream.window.size / SAMPLE_RATE)

    more = True
    while final is None:
        if more:
            more = feed()
        step_until_idle(engine, deliver, clock)
        if final is None and not more:
            raise RuntimeError("the stream went idle without a final")
    return final, len(clock.cpu), peak


def run_mode(engine: ASREngine, mode: str, audio: np.ndarray, tick_ms: int) -> tuple[str, int, float]:
    """(transcript, engine steps, peak window s) of one mode."""
    if mode == "offline":
        rid = engine.add_request(audio)
        return _offline(engine, rid)
    if mode == "attached":
        rid = engine.add_request(audio, streaming=True)
        final, steps, peak = _drive(engine, rid, lambda: False)
        return final.text, steps, peak
    rid = engine.add_streaming_request()
    tick = audio.size if mode == "burst" else SAMPLE_RATE * tick_ms // 1000
    fed = 0

    def feed() -> bool:
        nonlocal fed
        chunk = audio[fed : fed + tick]
        fed += chunk.size
        engine.feed_chunk(rid, chunk, is_last=fed >= audio.size)
        return fed < audio.size

    final, steps, peak = _drive(engine, rid, feed)
    return final.text, steps, peak


def _offline(engine: ASREngine, rid: str) -> tuple[str, int, float]:
    clock = StepClock(engine)
    done: list[RequestOutput] = []
    drive(engine, lambda outs: done.extend(o for o in outs if o.request_id == rid and o.finished),
          stop=lambda: bool(done), observer=clock)
    return done[0].text, len(clock.cpu), 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=9.0)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--tick-ms", type=int, default=500)
    parser.add_argument("--quantization", default="int8_w8a8")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("OASR_SPEECH_DATA", DATA)),
                        help="the speech data folder (default: $OASR_SPEECH_DATA or ../shared/data/speech)")
    parser.add_argument("--out", help="write the results (and transcripts) as JSON here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    audio, reference = recording(args.minutes, args.seed, args.data)
    engine = ASREngine(EngineConfig(service_mode="streaming", quantization=args.quantization))
    engine.transcribe_offline(np.zeros(SAMPLE_RATE, np.float32))  # warm-up
    results: dict[str, dict[str, object]] = {}
    try:
        for mode in args.modes.split(","):
            start = time.perf_counter()
            text, steps, peak = run_mode(engine, mode, audio, args.tick_ms)
            wall = time.perf_counter() - start
            score = wer([reference], [text])["wer"]
            results[mode] = {"wer": score, "steps": steps, "wall_s": round(wall, 1), "peak_window_s": round(peak, 1),
                             "text": text}
            print(json.dumps({"mode": mode, **{k: v for k, v in results[mode].items() if k != "text"}}), flush=True)
    finally:
        engine.shutdown()
    base = results.get("offline")
    summary = {"audio_s": round(audio.size / SAMPLE_RATE, 1), "quantization": args.quantization}
    for mode, r in results.items():
        row = {k: v for k, v in r.items() if k != "text"}
        if base is not None:
            row["wer_gap_points"] = round(100 * (float(r["wer"]) - float(base["wer"])), 2)  # type: ignore[arg-type]
            row["wall_vs_offline"] = round(float(r["wall_s"]) / float(base["wall_s"]), 2)  # type: ignore[arg-type]
        summary[mode] = row
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "reference": reference, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
