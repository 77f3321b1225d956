"""How many streaming Zipformer streams does one CPU core keep up with, batched versus one at a time?

Writes a Zipformer2 transducer sized like icefall's small streaming model (2 layers in each of six
stacks at 1,2,4,8,4,2x, dims 192-256, feed-forward 512-768, decoder/joiner 512, 500 tokens: about
23 M parameters; random weights, blank's bias raised so about a third of the frames emit, as a
trained model does) in the loader's format, then:

1. step cost: CPU time (process time, one torch thread) of engine steps that each advance B streams
   by one chunk, split into stages (fbank, cache gather/scatter, encoder forward, joiner projection,
   greedy decode), and the streams one core sustains from it (chunk period / cost per
   stream-chunk): a load-independent figure on a machine shared with other work;
2. batched versus one at a time: the same B streams with max_batch_size B and 1;
3. paced: N streams fed like microphones (one chunk of audio on absolute due times, starts
   staggered) through the engine driven by one thread, as the server drives it: partial latency
   (from the capture of the audio a step needs to its partial) p50/p95 and drift (its slope
   against audio position; near 0 keeps up);

beside seed 003's CPU track (sherpa-onnx, bilingual Zipformer with an int8 encoder: 32 streams at
160 ms chunks kept up on about 4 cores, i.e. 8 per core) and Speechmatics' self-hosted Standard
tier (2.5 real-time streams per vCPU).

    python -m benchmarks.zipformer_capacity --chunks 8 16 --batch 1 8 32 --sessions 4 8 16
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from benchmarks.streaming_capacity import load, percentile
from engine import ASREngine, EngineConfig, RequestOutput
from engine.loop import drive

SAMPLE_RATE = 16000
SMALL_ARGS: dict[str, Any] = {
    "num_encoder_layers": "2,2,2,2,2,2", "downsampling_factor": "1,2,4,8,4,2",
    "feedforward_dim": "512,768,768,768,768,768", "num_heads": "4,4,4,8,4,4",
    "encoder_dim": "192,256,256,256,256,256", "encoder_unmasked_dim": "192,192,192,192,192,192",
    "query_head_dim": "32", "value_head_dim": "12", "pos_head_dim": "4", "pos_dim": 48,
    "cnn_module_kernel": "31,31,15,15,15,31", "decoder_dim": 512, "joiner_dim": 512, "context_size": 2,
    "causal": True, "chunk_size": "8,16,32,64,-1", "left_context_frames": "64,128,256,-1", "vocab_size": 500,
}  # fmt: skip
"""icefall's zipformer 'small' recipe (egs/librispeech/ASR/zipformer README), causal, with chunk 8
(160 ms, seed 003's chunk) among the trained sizes."""
LEFT_CONTEXT = 128
"""50 Hz frames of left context (2.56 s; sherpa's small streaming exports use 128)."""
TOKEN_RATE = 0.3
"""Share of encoder frames that emit a token (random weights emit on nearly all)."""
SEED_003_STREAMS_PER_CORE = 32 / 4
SPEECHMATICS_STREAMS_PER_VCPU = 2.5
KEEPS_UP_DRIFT = 0.05
"""Median partial-latency slope (s per s of audio) under which a paced point counts as keeping up."""


def write_small(ckpt_dir: str, audio: np.ndarray) -> str:
    """A random-weight small streaming Zipformer in the loader's on-disk format."""
    from engine.models.zipformer.checkpoint import ZipformerModel, icefall_state_dict
    from engine.models.zipformer.config import ZipformerConfig
    from engine.models.zipformer.frontend import Featurizer

    os.makedirs(ckpt_dir, exist_ok=True)
    torch.manual_seed(0)
    cfg = ZipformerConfig.from_args(SMALL_ARGS, "benchmark")
    model = ZipformerModel(cfg).eval()
    with torch.inference_mode():  # blank's bias at the quantile that leaves TOKEN_RATE of frames emitting
        feats = Featurizer(torch.device("cpu")).utterance(audio[: 8 * SAMPLE_RATE])
        enc, _ = model.encoder(feats.unsqueeze(0), torch.tensor([feats.shape[0]]))
        dec = model.joiner.project_decoder(model.decoder.predict(torch.tensor([model.decoder.start_context()])))
        logits = model.joiner.join(model.joiner.project_encoder(enc[0]), dec)
        margin = logits[:, 1:].max(dim=-1).values - logits[:, 0]
        model.joiner.output_linear.bias[0] += float(torch.quantile(margin, 1 - TOKEN_RATE))
    torch.save({"model": icefall_state_dict(model)}, os.path.join(ckpt_dir, "pretrained.pt"))
    with open(os.path.join(ckpt_dir, "model_args.json"), "w") as f:
        json.dump(SMALL_ARGS, f)
    pieces = ["<blk>", "<sos/eos>", "<unk>"] + [f"▁w{i}" if i % 3 == 0 else f"p{i}" for i in range(497)]
    with open(os.path.join(ckpt_dir, "tokens.txt"), "w") as f:
        f.writelines(f"{p} {i}\n" for i, p in enumerate(pieces))
    return ckpt_dir


def engine_for(ckpt_dir: str, chunk: int, batch: int, threads: int | None) -> ASREngine:
    return ASREngine(EngineConfig(ckpt_dir=ckpt_dir, service_mode="streaming", max_batch_size=batch,
                                  chunk_size=chunk, num_left_chunks=LEFT_CONTEXT // chunk, num_threads=threads))  # fmt: skip


@contextmanager
def stage_clock(runner: Any) -> Iterator[dict[str, float]]:
    """Thread CPU seconds spent in each stage of the runner's steps, by wrapping its parts."""
    import engine.models.zipformer.runner as runner_module

    spent: dict[str, float] = defaultdict(float)

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.thread_time() - t
        return wrapper

    parts = [(runner.featurizer, "compute", "fbank"), (runner.slots, "gather", "cache gather"),
             (runner.slots, "scatter", "cache scatter"), (runner.model.encoder, "step", "encoder forward"),
             (runner.model.joiner, "project_encoder", "joiner projection")]  # fmt: skip
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in parts]
    greedy = runner_module.greedy_decode
    for obj, attr, name in parts:
        setattr(obj, attr, timed(name, getattr(obj, attr)))
    runner_module.greedy_decode = timed("greedy decode", greedy)  # type: ignore[assignment]
    try:
        yield spent
    finally:
        for obj, attr, fn in saved:
            setattr(obj, attr, fn)
        runner_module.greedy_decode = greedy  # type: ignore[assignment]


def step_cost(ckpt_dir: str, audio: np.ndarray, chunk: int, streams: int, batch: int, rounds: int) -> dict[str, Any]:
    """CPU time per stream-chunk of `streams` streams advanced `batch` at a time (one torch thread).
    Each round gives every stream one chunk of new audio (as live) and steps until all have used it."""
    from engine.request import Request
    from engine.types import DecodingOptions

    engine = engine_for(ckpt_dir, chunk, batch, threads=1)
    runner = engine.runner
    reqs = [Request(f"s{i}", True, DecodingOptions(), SAMPLE_RATE) for i in range(streams)]
    runner.admit(reqs)
    piece = 2 * chunk * 160  # samples of one chunk (2c fbank frames of 10 ms)
    warm_rounds = 3  # the first round cannot step (the look-ahead is not there yet); then one chunk a round
    assert (warm_rounds + rounds + 1) * piece <= audio.size, "clip too short for that many rounds"
    stream_chunks, cpu = 0, 0.0
    with stage_clock(runner) as spent:
        for k in range(warm_rounds + rounds):
            if k == warm_rounds:
                spent.clear()
            for r in reqs:
                r.append_audio(audio[k * piece : (k + 1) * piece])
            start = time.process_time()
            for _ in range(-(-streams // batch)):
                runner.execute()
                stream_chunks += runner.streams_stepped if k >= warm_rounds else 0
            cpu += time.process_time() - start if k >= warm_rounds else 0.0
    engine.shutdown()
    chunk_s = piece / SAMPLE_RATE
    per = cpu / stream_chunks
    row = {"chunk_ms": round(chunk_s * 1000), "streams": streams, "max_batch_size": batch,
           "cpu_ms_per_stream_chunk": round(per * 1000, 2), "streams_per_core": round(chunk_s / per, 1)}  # fmt: skip
    row["stages_ms_per_stream_chunk"] = {k: round(v / stream_chunks * 1000, 2) for k, v in spent.items()}
    row["other_ms_per_stream_chunk"] = round((cpu - sum(spent.values())) / stream_chunks * 1000, 2)
    return row


@dataclass
class Paced:
    captured: list[float] = field(default_factory=list)
    partials: list[tuple[float, float]] = field(default_factory=list)
    audio_end: float = 0.0
    final: float | None = None


def paced(ckpt_dir: str, audio: np.ndarray, chunk: int, n: int, batch: int, stagger_s: float,
          threads: int | None) -> dict[str, Any]:  # fmt: skip
    engine = engine_for(ckpt_dir, chunk, batch, threads)
    geo = engine.runner.geometry  # type: ignore[attr-defined]
    piece = geo.hop * 160
    chunk_s = piece / SAMPLE_RATE
    streams: dict[str, Paced] = {}
    lock = threading.Lock()
    t0 = time.monotonic() + 0.2

    def feeder(k: int) -> None:
        start = t0 + k * stagger_s
        time.sleep(max(0.0, start - time.monotonic()))
        rid = engine.add_streaming_request()
        s = Paced()
        with lock:
            streams[rid] = s
        for i, off in enumerate(range(0, audio.size, piece)):
            time.sleep(max(0.0, start + (i + 1) * chunk_s - time.monotonic()))
            s.captured.append(time.monotonic())
            engine.feed_chunk(rid, audio[off : off + piece], is_last=off + piece >= audio.size)
        s.audio_end = time.monotonic()

    workers = [threading.Thread(target=feeder, args=(k,), daemon=True) for k in range(n)]
    for w in workers:
        w.start()
    done, stepped = 0, []

    def deliver(outs: list[RequestOutput]) -> None:
        nonlocal done
        if engine.runner.streams_stepped:
            stepped.append(engine.runner.streams_stepped)
        now = time.monotonic()
        for o in outs:
            s = streams.get(o.request_id)
            if s is None:
                continue
            if o.finished:
                s.final, done = now - s.audio_end, done + 1
                continue
            # step k (0-based) needs features through frame 2c(k+1) + 13: audio through that frame's window
            k = len(s.partials)
            needed = ((k + 1) * geo.hop + geo.lookahead_frames) * 160 + 280
            idx = min(needed // piece, len(s.captured) - 1)
            s.partials.append((needed / SAMPLE_RATE, now - s.captured[idx]))

    drive(engine, deliver, stop=lambda: done >= n)
    engine.shutdown()
    lat = [x for s in streams.values() for _, x in s.partials]
    drifts = [float(np.polyfit([p for p, _ in s.partials], [x for _, x in s.partials], 1)[0])
              for s in streams.values() if len(s.partials) >= 3]  # fmt: skip
    finals = [s.final for s in streams.values() if s.final is not None]
    drift = statistics.median(drifts) if drifts else float("nan")
    return {"chunk_ms": round(chunk_s * 1000), "sessions": n, "max_batch_size": batch,
            "partial_p50_s": round(statistics.median(lat), 3), "partial_p95_s": round(percentile(lat, 0.95), 3),
            "drift_s_per_s": round(drift, 3), "final_p50_s": round(statistics.median(finals), 3),
            "mean_streams_per_step": round(sum(stepped) / max(1, len(stepped)), 2),
            "keeps_up": drift <= KEEPS_UP_DRIFT, "load_avg_1m": os.getloadavg()[0]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, nargs="+", default=[8, 16], help="chunk sizes, 50 Hz frames (8 = 160 ms)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32], help="streams per step-cost point")
    parser.add_argument("--rounds", type=int, default=8, help="measured chunks per stream per step-cost point")
    parser.add_argument("--sessions", type=int, nargs="*", default=[4, 8], help="paced sessions per point")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the paced runs (1: the step-cost points' setting; more oversubscribe a shared machine)")
    parser.add_argument("--clip", default="libri_2412-153948-0000")
    parser.add_argument("--ckpt-dir", default=None, help="where the random checkpoint is written (reused when already there)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    audio = load(args.clip)
    ckpt = args.ckpt_dir or tempfile.mkdtemp(prefix="zipformer-small-")
    if not os.path.isfile(os.path.join(ckpt, "pretrained.pt")):
        write_small(ckpt, audio)
    rows: dict[str, list[dict[str, Any]]] = {"step_cost": [], "paced": []}
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (a shared machine: "
          "paced points measure the neighbours too; step costs are CPU time of this process)")  # fmt: skip
    for chunk in args.chunks:
        rounds = min(args.rounds, audio.size // (2 * chunk * 160) - 4)
        for b in args.batch:
            for batch in sorted({b, 1}, reverse=True):  # batched, then the same streams one at a time
                row = step_cost(ckpt, audio, chunk, b, batch, rounds)
                rows["step_cost"].append(row)
                print(json.dumps(row), flush=True)
    for chunk in args.chunks:
        for n in args.sessions:
            row = paced(ckpt, audio, chunk, n, batch=64, stagger_s=0.1, threads=args.threads)
            rows["paced"].append(row)
            print(json.dumps(row), flush=True)
    best = max(r["streams_per_core"] for r in rows["step_cost"])
    print(f"\nbest: {best} streams per core (step cost, one thread) | seed 003 sherpa CPU track: "
          f"{SEED_003_STREAMS_PER_CORE:g} per core (32 streams at 160 ms on ~4 cores, int8 encoder) | "
          f"Speechmatics Standard: {SPEECHMATICS_STREAMS_PER_VCPU} per vCPU")  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
