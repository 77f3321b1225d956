"""`python -m benchmarks.asrbench engine {rtf,lockstep,paced} --family F ...`: one engine workload
swept over batch sizes / stream counts, a JSON line per point and a Markdown table at the end
(`--records FILE` appends the rows, with the command and model, to a JSON-lines file)."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from benchmarks.asrbench.audio import decode_file
from benchmarks.asrbench.engine_bench import measure, models
from benchmarks.asrbench.paths import DEV_MANIFEST
from engine import ASREngine, DecodingOptions, EngineConfig
from engine.errors import InvalidRequestError, UnsupportedError

SAMPLE_RATE = measure.SAMPLE_RATE
DEFAULT_CLIPS = ("libri_2412-153948-0000",)
"""An 11.7 s LibriSpeech dev clip; `rtf --clips` may name several, cycled over the batch."""


def clip_audio(clip_id: str) -> np.ndarray:
    """16 kHz mono samples of a clip of the shared dev set (../shared/data/speech, or $OASR_SPEECH_DATA)."""
    for line in DEV_MANIFEST.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if row.get("id") == clip_id:
            return decode_file(DEV_MANIFEST.parent / str(row["audio"]))
    raise SystemExit(f"no clip {clip_id!r} in {DEV_MANIFEST}")


def _family_option(text: str) -> tuple[str, str, Any]:
    """FAMILY.KEY=VALUE (VALUE parsed as YAML)."""
    key, sep, value = text.partition("=")
    family, dot, name = key.partition(".")
    if not (sep and dot and family and name):
        raise argparse.ArgumentTypeError(f"expected FAMILY.KEY=VALUE, got {text!r}")
    return family, name, yaml.safe_load(value)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m benchmarks.asrbench engine",
                                               description=sys.modules["benchmarks.asrbench.engine_bench"].__doc__,
                                               formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measurement", choices=list(measure.MEASUREMENTS))
    parser.add_argument("--family", required=True, choices=models.FAMILIES)
    parser.add_argument("--size", choices=models.SIZES, default="tiny",
                        help="tiny: the family's committed test fixture; realistic: random weights of a released "
                        "model's shape (engine/synthetic.py)")
    parser.add_argument("--ckpt-dir", help="load this checkpoint instead (e.g. a trained model)")
    parser.add_argument("--clips", nargs="+", default=list(DEFAULT_CLIPS), help="dev clip ids, cycled")
    parser.add_argument("--seconds", type=float, default=None, help="cut each clip to this many seconds")
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument("--batch", type=int, nargs="+", default=[1, 8],
                       help="rtf: requests admitted together; lockstep: streams")
    sweep.add_argument("--sessions", type=int, nargs="+", default=[1, 4], help="paced: streams")
    sweep.add_argument("--batch-sizes", type=int, nargs="+", default=[None],
                       help="EngineConfig.max_batch_size per point (default: the largest batch / session count)")
    sweep.add_argument("--repeat", type=int, default=1, help="runs per point; the one with the least CPU (paced: the lowest partial p95) is kept")
    parser.add_argument("--tick-ms", type=int, default=None, help="lockstep: audio fed per tick (default one step's)")
    parser.add_argument("--stagger-s", type=float, default=0.1, help="paced: start offset between sessions")
    cfg = parser.add_argument_group("engine")
    cfg.add_argument("--threads", type=int, default=1,
                     help="torch threads (1: on a shared machine OpenMP workers spinning for a descheduled sibling "
                     "cost 10-20x the work)")
    cfg.add_argument("--quantization", default="auto", choices=["auto", "none", "int8_w8a8"])
    cfg.add_argument("--chunk-size", type=int, help="EngineConfig.chunk_size (encoder frames a streaming step)")
    cfg.add_argument("--num-left-chunks", type=int, help="EngineConfig.num_left_chunks")
    cfg.add_argument("--beam", type=int, default=1, help="DecodingOptions.beam_size of every request")
    cfg.add_argument("--family-option", type=_family_option, action="append", default=[],
                     metavar="FAMILY.KEY=VALUE", help="EngineConfig.family_options entry (repeatable)")
    parser.add_argument("--records", type=Path, help="append each row as a JSON line to this file")
    parser.add_argument("--json", action="store_true", help="print only the JSON rows")
    return parser


def engine_config(args: argparse.Namespace, ckpt_dir: str | None, max_batch_size: int) -> EngineConfig:
    family_options: dict[str, dict[str, Any]] = {}
    for family, key, value in args.family_option:
        family_options.setdefault(family, {})[key] = value
    sizes = {k: v for k, v in (("chunk_size", args.chunk_size), ("num_left_chunks", args.num_left_chunks))
             if v is not None}
    return EngineConfig(ckpt_dir=ckpt_dir, service_mode="offline" if args.measurement == "rtf" else "streaming",
                        max_batch_size=max_batch_size, quantization=args.quantization, num_threads=args.threads,
                        family_options=family_options, **sizes)  # type: ignore[arg-type]


def points(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(requests or streams, max_batch_size) of each point, in run order."""
    counts = args.sessions if args.measurement == "paced" else args.batch
    return [(n, mbs or max(counts)) for mbs, n in itertools.product(args.batch_sizes, counts)]


def run_point(args: argparse.Namespace, ckpt_dir: str | None, clips: list[np.ndarray], n: int,
              max_batch_size: int) -> dict[str, Any]:
    """One point on a fresh engine (warmed on one short request): the measurement's row."""
    engine = ASREngine(engine_config(args, ckpt_dir, max_batch_size))
    try:
        decoding = DecodingOptions(beam_size=args.beam)
        engine.transcribe(clips[0][:SAMPLE_RATE], decoding=decoding)  # warm-up: allocator, kernels
        audios = list(itertools.islice(itertools.cycle(clips), n))
        if args.measurement == "rtf":
            return measure.rtf(engine, audios, decoding)
        if args.measurement == "lockstep":
            return measure.lockstep(engine, audios, args.tick_ms / 1000 if args.tick_ms else None, decoding)
        return measure.paced(engine, audios[0], n, args.stagger_s, decoding)
    finally:
        engine.shutdown()


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as one Markdown table (columns in the rows' own order)."""
    if not rows:
        return ""
    columns = [c for c in rows[0] if c != "digest"]
    lines = ["| " + " | ".join(c.replace("_", " ") for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv_used = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv_used)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    clips = [clip_audio(c) for c in args.clips]
    if args.seconds:
        clips = [c[: int(args.seconds * SAMPLE_RATE)] for c in clips]
    rows: list[dict[str, Any]] = []
    with models.checkpoint(args.family, args.size, args.ckpt_dir) as ckpt_dir:
        model = models.describe(args.family, args.size, args.ckpt_dir)
        for n, mbs in points(args):
            try:
                runs = [run_point(args, ckpt_dir, clips, n, mbs) for _ in range(args.repeat)]
            except (UnsupportedError, InvalidRequestError) as exc:  # e.g. lockstep on a family without streaming
                sys.stderr.write(f"error: {args.measurement} on {model}: {exc}\n")
                return 2
            row = min(runs, key=lambda r: r.get("cpu_s", r.get("partial_p95_s", 0.0)))
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.records:
                record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "command": shlex.join(["python", "-m", "benchmarks.asrbench", "engine", *argv_used]),
                          "measurement": args.measurement,
                          "family": args.family, "model": model, "threads": args.threads,
                          "quantization": args.quantization, "row": row}
                with args.records.open("a") as f:
                    f.write(json.dumps(record) + "\n")
    if not args.json:
        print(f"\n{args.measurement}, {model}, {args.threads} torch thread(s), quantization {args.quantization}\n")
        print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
