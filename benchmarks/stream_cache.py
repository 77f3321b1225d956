"""Cache-aware streaming throughput: one batched paged forward per step vs one stream at a time.

For a generated ~10M-parameter WeNet Conformer-CTC (random init, real checkpoint format) and
N live streams (N = 1, 8, 32, 64), each step feeds every stream one chunk of audio
(chunk_size encoder frames = 640 ms at 16) and calls `runner.execute()`:

- batched:    max_batch_size=N, every stream advances in ONE forward per step;
- sequential: max_batch_size=1, one stream per forward (what a per-stream runtime does).
Both run side by side, alternating chunk by chunk, so a shared machine's load hits both alike.

Streams first build up `--warmup-chunks` of KV history (so attention reads a real context
through the block tables), then `--chunks` steps are timed. Reported: step time, streams
advanced per second and how many live streams that sustains in real time.

    python -m benchmarks.stream_cache [--sizes 1 8 32 64] [--chunks 4] [--threads N] [--repeats 2]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch

from engine.config import EngineConfig
from engine.models.wenet.runner import WenetRunner
from engine.models.wenet.testing import CheckpointSpec, write_checkpoint
from engine.request import Request
from engine.types import DecodingOptions

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # Hz
CHUNK_SIZE = 16  # encoder frames per chunk: 16 x 40 ms = 640 ms of audio
CHUNK_SAMPLES = CHUNK_SIZE * 4 * 160  # 4x subsampling of 10 ms (160-sample) fbank frames
MODEL = CheckpointSpec(
    output_size=256, attention_heads=4, linear_units=1024, num_blocks=6, cnn_module_kernel=15
)
"""~11M parameters: a small U2++ conformer (d=256, 6 blocks, FFN 1024)."""


@dataclass
class Row:
    streams: int
    mode: str
    step_ms: float
    """Mean wall time of one engine step (`execute`)."""
    advanced_per_s: float
    """Stream-chunks advanced per second."""

    @property
    def realtime_streams(self) -> float:
        """Live streams this rate keeps up with (each needs one chunk per 640 ms)."""
        return self.advanced_per_s * CHUNK_SAMPLES / SAMPLE_RATE


class _Side:
    """One runner with `streams` live streams, stepping and timing itself."""

    def __init__(self, ckpt: str, streams: int, batch: int, audio: np.ndarray) -> None:
        config = EngineConfig(
            ckpt_dir=ckpt, service_mode="streaming", chunk_size=CHUNK_SIZE, max_batch_size=batch, device="cpu"
        )
        self.runner = WenetRunner.from_config(config)
        self.streams, self.batch, self.audio = streams, batch, audio
        self.reqs = [Request(f"s{i}", True, DecodingOptions(), SAMPLE_RATE) for i in range(streams)]
        assert not self.runner.admit(self.reqs)
        # The first window needs 3 extra fbank frames: prime them so each later chunk is one step.
        self.fed = 1200
        for req in self.reqs:
            req.append_audio(audio[: self.fed])
        self.steps = self.advanced = 0
        self.elapsed = 0.0

    def advance_everyone(self, timed: bool) -> None:
        for req in self.reqs:
            req.append_audio(self.audio[self.fed : self.fed + CHUNK_SAMPLES])
        self.fed += CHUNK_SAMPLES
        for _ in range(-(-self.streams // self.batch)):  # steps to move every stream one chunk
            t0 = time.perf_counter()
            outs = self.runner.execute()
            dt = time.perf_counter() - t0
            if timed:
                self.elapsed += dt
                self.steps += 1
                self.advanced += len(outs)

    def row(self, mode: str) -> Row:
        return Row(self.streams, mode, 1000 * self.elapsed / self.steps, self.advanced / self.elapsed)


def run(ckpt: str, streams: int, warmup_chunks: int, chunks: int) -> list[Row]:
    """Batched and (for streams > 1) sequential sides, advanced in alternation chunk by chunk so
    both see the same load on a shared machine."""
    rng = np.random.default_rng(0)
    audio = (rng.standard_normal(CHUNK_SAMPLES * (warmup_chunks + chunks + 1)) * 0.1).astype(np.float32)
    sides = {"batched": _Side(ckpt, streams, streams, audio)}
    if streams > 1:
        sides["sequential"] = _Side(ckpt, streams, 1, audio)
    for chunk in range(warmup_chunks + chunks):
        for side in sides.values():
            side.advance_everyone(timed=chunk >= warmup_chunks)
    return [side.row(mode) for mode, side in sides.items()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32, 64], help="live streams per run")
    parser.add_argument("--warmup-chunks", type=int, default=4, help="chunks of history built before timing")
    parser.add_argument("--chunks", type=int, default=4, help="timed chunks per stream")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs per point; the fastest is kept (shared CPU)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_checkpoint(tmp, MODEL)
        params = sum(
            p.numel()
            for p in WenetRunner.from_config(EngineConfig(ckpt_dir=ckpt, device="cpu")).model.parameters()
        )
        print(f"model: {params / 1e6:.1f}M params, chunk {CHUNK_SIZE} frames (640 ms), "
              f"{torch.get_num_threads()} torch threads, history {args.warmup_chunks} chunks")  # fmt: skip
        print(f"{'streams':>7} {'mode':>10} {'step ms':>9} {'streams adv/s':>14} {'real-time streams':>18}")
        for n in args.sizes:
            runs = [run(ckpt, n, args.warmup_chunks, args.chunks) for _ in range(args.repeats)]
            rows = [min((r[i] for r in runs), key=lambda row: row.step_ms) for i in range(len(runs[0]))]
            for r in rows:
                print(
                    f"{r.streams:>7} {r.mode:>10} {r.step_ms:>9.1f} {r.advanced_per_s:>14.1f} {r.realtime_streams:>18.1f}"
                )
            if n > 1:
                print(
                    f"{'':>7} {'speedup':>10} {'':>9} {rows[0].advanced_per_s / rows[1].advanced_per_s:>13.2f}x"
                )


if __name__ == "__main__":
    main()
