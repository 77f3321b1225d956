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
stream. A paced session also reports each `--stretch-min` of its audio (issue 43: a long live
session keeps its per-pass cost and its memory flat): the passes run over it, the engine's CPU
per pass and per audio second, the stream's longest window, its committed words, and the process
RSS at the stretch's end. Run it under the benchmark lock:

    flock /tmp/oasr-bench.lock python -m benchmarks.live_catchup
    flock /tmp/oasr-bench.lock python -m benchmarks.live_catchup --modes offline,burst --minutes 3
    flock /tmp/oasr-bench.lock python -m benchmarks.live_catchup --modes paced --minutes 30
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psutil

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


@dataclass
class Stretch:
    """One stretch of a paced session's audio, as the engine went through it."""

    ends_min: float
    """Minutes of audio fed by the stretch's end."""
    passes: int
    cpu_s: float
    """Engine CPU (process time of its steps) over the stretch."""
    cpu_ms_per_pass: float
    cpu_ms_per_audio_s: float
    peak_window_s: float
    committed_words: int
    """The stream's committed words at the stretch's end (the transcript, which grows)."""
    rss_mib: float


class _Stretches:
    """Cuts a paced session into stretches of `minutes` of audio (`tick` after each feed)."""

    def __init__(self, engine: ASREngine, rid: str, minutes: float) -> None:
        self.engine, self.rid, self.samples = engine, rid, int(minutes * 60 * SAMPLE_RATE)
        self.rows: list[Stretch] = []
        self._cpu = 0.0
        self._passes = self._passes_so_far()  # the engine's count includes the modes run before
        self._peak = 0.0
        self._at = 0
        self._words = 0

    def _passes_so_far(self) -> int:
        return int(self.engine.runner.stats().stream_passes_total)

    def observe(self) -> None:
        """After every step: the stream's window and committed words (the final's own commits,
        made as the stream ends, are not seen)."""
        stream = self.engine.runner.streams.get(self.rid)  # type: ignore[attr-defined]
        if stream is not None:
            self._peak = max(self._peak, stream.window.size / SAMPLE_RATE)
            self._words = len(stream.committed_words)

    def tick(self, fed: int, cpu: list[float], last: bool) -> None:
        """After each feed, once the engine is idle: close a stretch when it is long enough."""
        if fed - self._at < self.samples and not (last and fed > self._at):
            return
        total_cpu = sum(cpu)
        passes = self._passes_so_far()
        n, spent = int(passes - self._passes), total_cpu - self._cpu
        audio_s = (fed - self._at) / SAMPLE_RATE
        self.rows.append(Stretch(round(fed / SAMPLE_RATE / 60, 1), n, round(spent, 1),
                                 round(1000 * spent / max(1, n), 1), round(1000 * spent / audio_s, 1),
                                 round(self._peak, 1), self._words, round(psutil.Process().memory_info().rss / 2**20)))
        self._cpu, self._passes, self._at, self._peak = total_cpu, passes, fed, 0.0


def _drive(engine: ASREngine, rid: str, feed: Callable[[], bool],
           after_feed: Callable[[list[float]], None] | None = None,
           after_step: Callable[[], None] | None = None) -> tuple[RequestOutput, int, float]:
    """Feed by `feed` (False once all is fed) and step until idle after each feed (engine/loop.py),
    calling `after_step` after every step and `after_feed` with every step's CPU so far once
    idle; the final output, the steps taken and the stream's longest window (s)."""
    clock = StepClock(engine)
    final: RequestOutput | None = None
    peak = 0.0

    def deliver(outs: list[RequestOutput]) -> None:
        nonlocal final, peak
        final = next((o for o in outs if o.request_id == rid and o.finished), final)
        stream = engine.runner.streams.get(rid)  # type: ignore[attr-defined]
        if stream is not None:
            peak = max(peak, stream.window.size / SAMPLE_RATE)
        if after_step is not None:
            after_step()

    more = True
    while final is None:
        if more:
            more = feed()
        step_until_idle(engine, deliver, clock)
        if after_feed is not None:
            after_feed(clock.cpu)
        if final is None and not more:
            raise RuntimeError("the stream went idle without a final")
    return final, len(clock.cpu), peak


def run_mode(engine: ASREngine, mode: str, audio: np.ndarray, tick_ms: int,
             stretch_min: float = 5.0) -> tuple[str, int, float, list[Stretch]]:
    """(transcript, engine steps, peak window s, the paced session's stretches) of one mode."""
    if mode == "offline":
        rid = engine.add_request(audio)
        return (*_offline(engine, rid), [])
    if mode == "attached":
        rid = engine.add_request(audio, streaming=True)
        final, steps, peak = _drive(engine, rid, lambda: False)
        return final.text, steps, peak, []
    rid = engine.add_streaming_request()
    tick = audio.size if mode == "burst" else SAMPLE_RATE * tick_ms // 1000
    fed = 0
    stretches = _Stretches(engine, rid, stretch_min)

    def feed() -> bool:
        nonlocal fed
        chunk = audio[fed : fed + tick]
        fed += chunk.size
        engine.feed_chunk(rid, chunk, is_last=fed >= audio.size)
        return fed < audio.size

    paced = mode == "paced"
    after = (lambda cpu: stretches.tick(fed, cpu, fed >= audio.size)) if paced else None
    final, steps, peak = _drive(engine, rid, feed, after, stretches.observe if paced else None)
    return final.text, steps, peak, stretches.rows


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
    parser.add_argument("--stretch-min", type=float, default=5.0,
                        help="paced: report the session's cost and memory every this many minutes of audio")
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
            text, steps, peak, stretches = run_mode(engine, mode, audio, args.tick_ms, args.stretch_min)
            wall = time.perf_counter() - start
            score = wer([reference], [text])["wer"]
            results[mode] = {"wer": score, "steps": steps, "wall_s": round(wall, 1), "peak_window_s": round(peak, 1),
                             "text": text}
            print(json.dumps({"mode": mode, **{k: v for k, v in results[mode].items() if k != "text"}}), flush=True)
            if stretches:
                results[mode]["stretches"] = [asdict(s) for s in stretches]
                _print_stretches(stretches)
    finally:
        engine.shutdown()
    base = results.get("offline")
    summary = {"audio_s": round(audio.size / SAMPLE_RATE, 1), "quantization": args.quantization}
    for mode, r in results.items():
        row = {k: v for k, v in r.items() if k not in ("text", "stretches")}
        if base is not None:
            row["wer_gap_points"] = round(100 * (float(r["wer"]) - float(base["wer"])), 2)  # type: ignore[arg-type]
            row["wall_vs_offline"] = round(float(r["wall_s"]) / float(base["wall_s"]), 2)  # type: ignore[arg-type]
        summary[mode] = row
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "reference": reference, "results": results}, f, indent=1)


def _print_stretches(stretches: list[Stretch]) -> None:
    print("\n| audio fed (min) | passes | engine CPU s | CPU ms / pass | CPU ms / audio s | longest window s "
          "| committed words | RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for s in stretches:
        print(f"| {s.ends_min} | {s.passes} | {s.cpu_s} | {s.cpu_ms_per_pass} | {s.cpu_ms_per_audio_s} "
              f"| {s.peak_window_s} | {s.committed_words} | {s.rss_mib} |", flush=True)


if __name__ == "__main__":
    main()
