"""Where a transducer beam search's time goes on CPU: the searches' Python loops against the
compiled greedy label loop, on generated FastConformer-sized transducers (vocab 1024, LSTM 640,
joint 640, encoder 512), streams decoding one 16-frame chunk each (8 chunks, state carried).

Printed per case, alternating the cases `--repeats` times (a shared machine's load hits all
alike): process CPU time per chunk of all streams, and its ratio to greedy; then the share of the
search spent inside the network (prediction-network steps and joints), i.e. what a C++ loop could
not remove.

    python -m benchmarks.transducer_beam [--streams 8] [--beam 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from engine.models.nemo.beam import NemoTransducerNet
from engine.ops import TransducerWeights, rnnt_greedy_label_loop
from engine.ops.malsd import MalsdBeam, malsd_search
from engine.ops.modified_beam import ModifiedBeam, modified_beam_search

CHUNK_FRAMES = 16
"""Encoder frames per chunk (1.28 s at 80 ms frames)."""
CHUNKS = 8
BLANK_BIAS = 40.0
"""Raises blank's logit so the generated joint emits ~0.3 tokens per frame (greedy), as a trained
model does; a smaller bias emits max_symbols tokens on every frame."""


class _TimedNet:
    """A TransducerNet that counts the CPU time spent in its network calls."""

    def __init__(self, net: NemoTransducerNet) -> None:
        self.net, self.seconds = net, 0.0
        self.blank = net.blank

    def _timed(self, fn: Callable[..., torch.Tensor], *args: object) -> object:
        start = time.process_time()
        out = fn(*args)
        self.seconds += time.process_time() - start
        return out

    def project(self, enc: torch.Tensor) -> torch.Tensor:
        return self._timed(self.net.project, enc)  # type: ignore[return-value]

    def start(self, rows: int) -> tuple[torch.Tensor, ...]:
        return self.net.start(rows)

    def step(self, labels: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return self._timed(self.net.step, labels, state)  # type: ignore[return-value]

    def log_probs(self, frames: torch.Tensor, state: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self._timed(self.net.log_probs, frames, state)  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    weights = TransducerWeights.random(vocab=1024, pred_hidden=640, joint_hidden=640, enc_hidden=512, seed=0,
                                       blank_bias=BLANK_BIAS)  # fmt: skip
    net = NemoTransducerNet(weights)
    gen = torch.Generator().manual_seed(1)
    chunks = [torch.randn(args.streams, CHUNK_FRAMES, 512, generator=gen) * 3 for _ in range(CHUNKS)]
    lengths = torch.full((args.streams,), CHUNK_FRAMES)

    def greedy() -> float:
        state = weights.initial_state(args.streams)
        for enc in chunks:
            _, state = rnnt_greedy_label_loop(weights.project(enc), lengths, state, weights, max_symbols=10)
        return 0.0

    def malsd() -> float:
        timed = _TimedNet(net)
        beams = [MalsdBeam.initial(net, args.beam) for _ in range(args.streams)]
        for enc in chunks:
            malsd_search(timed, timed.project(enc), lengths, beams, max_symbols=10)  # type: ignore[arg-type]
        return timed.seconds

    def modified() -> float:
        timed = _TimedNet(net)
        beams = [ModifiedBeam.initial(net, args.beam, 2) for _ in range(args.streams)]
        for enc in chunks:
            modified_beam_search(timed, timed.project(enc), [CHUNK_FRAMES] * args.streams, beams)  # type: ignore[arg-type]
        return timed.seconds

    cases = {"greedy (engine._C label loop)": greedy, f"malsd beam {args.beam}": malsd,
             f"modified beam {args.beam}": modified}  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in cases}
    inside: dict[str, list[float]] = {k: [] for k in cases}
    with torch.inference_mode():
        for _ in range(args.repeats):
            for name, fn in cases.items():
                start = time.process_time()
                net_seconds = fn()
                total = time.process_time() - start
                times[name].append(total / CHUNKS)
                inside[name].append(net_seconds / total)
    base = statistics.median(times["greedy (engine._C label loop)"])
    print(f"{args.streams} streams x {CHUNK_FRAMES}-frame chunks, CPU ms per chunk of all streams (median of {args.repeats}):")
    for name in cases:
        t = statistics.median(times[name])
        share = statistics.median(inside[name])
        net_text = f", {share:.0%} in network calls" if share else ""
        print(f"  {name:32s} {t * 1000:8.1f} ms  x{t / base:5.1f} vs greedy{net_text}")


if __name__ == "__main__":
    main()
