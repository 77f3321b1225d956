"""The compiled operators (engine._C) against their Python references, on CPU.

Each case runs both sides alternately, `--repeats` times, so a shared machine's load hits both
alike; printed: every repeat's times and ratio, then the median ratio and its spread.

- ctc:   CTC prefix beam search, beam 10, 32 utterances x 300 frames, vocabulary 5000;
- rnnt:  greedy RNN-T label loop, 32 streams x one 16-frame chunk (8 chunks, state carried),
         a FastConformer-sized generated transducer (vocab 1024, LSTM 640, joint 640);
- rnnt-small: the same with a small transducer (vocab 256, LSTM 128, joint 128), where the
         loop's per-step overhead rather than the GEMMs dominates;
- attention: the paged attention of one WeNet streaming layer (reference: gather + dense masked
         softmax) (32 streams x 16 queries, 4 heads of
         64, 256 frames of history in 16-frame blocks), operator vs reference;
- int8:  quantize / dequantize rows around one int32 GEMM of Whisper tiny.en's MLP shape;
- fbank: Kaldi fbank of 32 streams' 640 ms chunks, the C++ kernel vs engine/fbank.py's torch
         path (why the engine keeps torch on CPU).

    python -m benchmarks.kernels [--cases ctc rnnt attention fbank int8] [--repeats 3] [--threads 1] [--cpu-time]

--cpu-time measures process CPU time instead of wall time (with --threads 1: the time this
process computed, less disturbed by other processes competing for the cores). What the operators
save in a whole engine step: `python -m benchmarks.asrbench engine lockstep --family wenet`, with
and without engine._C.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from engine.ops import (
    BeamState,
    TransducerWeights,
    ctc_prefix_beam_search,
    extension_status,
    int8_rows,
    paged_attention,
    rnnt_greedy_label_loop,
)
from engine.ops.fbank import KaldiFbank, kaldi_fbank_batched

SAMPLE_RATE = 16000  # Hz
CHUNK_FRAMES = 16  # WeNet encoder frames per chunk: 640 ms
CHUNK_SAMPLES = CHUNK_FRAMES * 4 * 160

Case = Callable[[bool], float]
"""Runs one side (True: extension) and returns its seconds."""
clock = time.perf_counter


def timed(fn: Callable[[], object]) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def ctc_case() -> Case:
    g = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(32, 300, 5000, generator=g) * 3, dim=-1)
    lengths = torch.full((32,), 300)

    def run(ext: bool) -> float:
        return timed(lambda: ctc_prefix_beam_search(lp, lengths, BeamState.initial(32), beam=10, blank=0,
                                                    use_extension=ext))  # fmt: skip

    return run


def rnnt_case(vocab: int = 1024, hidden: int = 640) -> Case:
    w = TransducerWeights.random(vocab=vocab, pred_hidden=hidden, joint_hidden=hidden, enc_hidden=512, blank_bias=12.0)
    enc = torch.randn(32, 8 * CHUNK_FRAMES, 512, generator=torch.Generator().manual_seed(0))
    f = w.project(enc)

    def run(ext: bool) -> float:
        state, total = w.initial_state(32), 0.0
        for start in range(0, f.shape[1], CHUNK_FRAMES):
            piece = f[:, start : start + CHUNK_FRAMES].contiguous()
            t0 = clock()
            _, state = rnnt_greedy_label_loop(piece, torch.full((32,), CHUNK_FRAMES), state, w, 10, use_extension=ext)
            total += clock() - t0
        return total

    return run


def attention_case(history: int = 256) -> Case:
    g = torch.Generator().manual_seed(0)
    blocks = history // CHUNK_FRAMES + 1
    pool_blocks = 32 * blocks

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    table = torch.randperm(pool_blocks, generator=g).reshape(32, blocks)
    args = (randn(32, CHUNK_FRAMES, 4, 64), randn(32, CHUNK_FRAMES, 4, 64), randn(32, CHUNK_FRAMES, 4, 64),
            randn(pool_blocks * CHUNK_FRAMES, 4, 64), randn(pool_blocks * CHUNK_FRAMES, 4, 64), table,
            torch.zeros(32, dtype=torch.long), torch.full((32,), history), torch.full((32,), CHUNK_FRAMES),
            randn(32, 4, CHUNK_FRAMES, history + CHUNK_FRAMES), 0.125, CHUNK_FRAMES)  # fmt: skip

    def run(ext: bool) -> float:
        return timed(lambda: paged_attention(*args, use_extension=ext))  # type: ignore[arg-type]

    return run


def fbank_case() -> Case:
    fb = KaldiFbank()
    rng = np.random.default_rng(0)
    waves = [torch.from_numpy((rng.standard_normal(CHUNK_SAMPLES) * 3000).astype(np.float32)) for _ in range(32)]

    def run(ext: bool) -> float:
        if ext:
            return timed(lambda: kaldi_fbank_batched(waves, fb._window, fb._banks, fb.opts, use_extension=True))
        return timed(lambda: fb(waves))

    return run


def int8_linear_case(rows: int = 6000, inputs: int = 384, outputs: int = 1536) -> Case:
    """An int8 layer of Whisper tiny.en's encoder MLP over 20 windows of 300 positions: the row
    kernels (quantize, dequantize) against their torch references around the same int32 GEMM."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randint(-127, 128, (outputs, inputs), dtype=torch.int8, generator=g)
    col_scale, bias = torch.rand(outputs, generator=g) * 1e-3, torch.randn(outputs, generator=g)
    x = torch.randn(rows, inputs, generator=g)

    def layer(ext: bool) -> torch.Tensor:
        q, row_scale = int8_rows.quantize_rows(x, use_extension=ext)
        return int8_rows.dequantize_rows(torch._int_mm(q, weight.t()), row_scale, col_scale, bias, use_extension=ext)

    def run(ext: bool) -> float:
        return timed(lambda: layer(ext))

    return run


def measure(name: str, case: Case, repeats: int, inner: int) -> None:
    ratios = []
    for r in range(repeats):
        ext = sum(case(True) for _ in range(inner))
        ref = sum(case(False) for _ in range(inner))
        ratios.append(ref / ext)
        print(f"{name:>10} repeat {r + 1}: python {1000 * ref / inner:9.1f} ms  extension {1000 * ext / inner:9.1f} ms"
              f"  ratio {ref / ext:6.2f}x")  # fmt: skip
    print(f"{name:>10} ratio (python / extension): median {statistics.median(ratios):.2f}x, "
          f"min {min(ratios):.2f}x, max {max(ratios):.2f}x over {repeats} repeats")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=["ctc", "rnnt", "rnnt-small", "attention", "fbank", "int8"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--cpu-time", action="store_true", help="time with process CPU time, not wall time")
    args = parser.parse_args()
    global clock
    if args.cpu_time:
        clock = time.process_time
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    status = extension_status()
    if not status.loaded:
        raise SystemExit(f"engine._C is not loaded: {status.detail}")
    print(f"{torch.get_num_threads()} torch threads, {'CPU' if args.cpu_time else 'wall'} time; {status.detail}")
    for name in args.cases:
        if name == "ctc":
            measure(name, ctc_case(), args.repeats, 1)
        elif name == "rnnt":
            measure(name, rnnt_case(), args.repeats, 1)
        elif name == "rnnt-small":
            measure(name, rnnt_case(vocab=256, hidden=128), args.repeats, 1)
        elif name == "attention":
            measure(name, attention_case(), args.repeats, 10)
        elif name == "fbank":
            measure(name, fbank_case(), args.repeats, 5)
        elif name == "int8":
            measure(name, int8_linear_case(), args.repeats, 5)
        else:
            raise SystemExit(f"unknown case {name!r}")


if __name__ == "__main__":
    main()
