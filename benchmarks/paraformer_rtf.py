"""Offline Paraformer throughput: RTFx (seconds of audio per second) at batch 1, 8 and 32.

Builds a Paraformer sized like FunASR's paraformer-large / paraformer-zh (SAN-M encoder 50 blocks
of d_model 512, 4 heads, FFN 2048, FSMN kernel 11; decoder 16 blocks, all cross-attending;
vocabulary 8404; LFR 7/6 over 80 mels) with random weights (nothing can be downloaded here), and
runs B requests through the runner's real path: admit B requests, one `execute()` (batched
fbank, LFR + CMVN, length-sorted padded forwards of encoder, CIF and decoder, outputs). `--clips
same`: B copies of one 4.9 s clip (batching alone, no padding); `mixed`: six dev clips of 3.6 to
11.7 s cycled (the runner splits them into forwards within its padding limit).
A random model fires a token count set by its random CIF weights, not by speech; the decoder's
share of the time is therefore only indicative.

Reported per batch size: wall RTFx, and CPU RTFx (audio seconds per process-CPU second, all
threads): on a machine shared with other work the wall figure measures the neighbours too, the
CPU figure much less so.

    python -m benchmarks.paraformer_rtf --batch 1 8 32 --threads 1 --clips same
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import time

import numpy as np
import torch

from engine.config import EngineConfig
from engine.models.paraformer.checkpoint import ParaformerCheckpoint
from engine.models.paraformer.config import parse_config
from engine.models.paraformer.model import Paraformer
from engine.models.paraformer.runner import ParaformerRunner
from engine.request import Request
from engine.types import DecodingOptions
from tests.conftest import load_clip

logger = logging.getLogger("paraformer_rtf")

CLIPS = ("mfa_her", "mfa_thoughts", "mfa_um", "libri_61-70968-0000", "jfk_inaugural", "libri_2412-153948-0000")
VOCAB = 8404
"""paraformer-zh's vocabulary (`vocab8404`)."""
LARGE = {
    "model": "Paraformer",
    "encoder": "SANMEncoder",
    "encoder_conf": {"output_size": 512, "attention_heads": 4, "linear_units": 2048, "num_blocks": 50,
                     "input_layer": "pe", "kernel_size": 11, "sanm_shfit": 0},
    "decoder": "ParaformerSANMDecoder",
    "decoder_conf": {"attention_heads": 4, "linear_units": 2048, "num_blocks": 16, "att_layer_num": 16,
                     "kernel_size": 11, "sanm_shfit": 0},
    "predictor": "CifPredictorV2",
    "predictor_conf": {"idim": 512, "threshold": 1.0, "l_order": 1, "r_order": 1, "tail_threshold": 0.45},
    "frontend": "WavFrontend",
    "frontend_conf": {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25, "frame_shift": 10,
                      "lfr_m": 7, "lfr_n": 6},
}
"""FunASR's paraformer-large config.yaml, the parts the runtime reads."""


def large_runner(max_batch: int) -> ParaformerRunner:
    torch.manual_seed(0)
    cfg = parse_config(LARGE, VOCAB)
    model = Paraformer(cfg).eval()
    with torch.no_grad():  # a CIF weight near 0.3 per 60 ms frame: about 5 tokens a second
        model.predictor.cif_output.bias.fill_(-0.85)
    dim = cfg.encoder.input_size
    ckpt = ParaformerCheckpoint(model, cfg, [f"t{i}" for i in range(VOCAB)], (torch.zeros(dim), torch.ones(dim)),
                                "model.pt", "Paraformer")  # fmt: skip
    return ParaformerRunner(ckpt, EngineConfig(max_batch_size=max_batch, device="cpu"), torch.device("cpu"))


def run_batch(runner: ParaformerRunner, audios: list[np.ndarray]) -> tuple[float, float, int]:
    """(wall s, process CPU s, tokens) of one execute() over all `audios`."""
    reqs = [Request(f"b{i}", streaming=False, decoding=DecodingOptions(), sample_rate=16000, audio=a)
            for i, a in enumerate(audios)]  # fmt: skip
    runner.admit(reqs)
    wall, cpu = time.perf_counter(), time.process_time()
    outs = runner.execute()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert len(outs) == len(audios) and all(o.finish_reason == "stop" for o in outs), outs[:1]
    return wall, cpu, sum(len(o.tokens) for o in outs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32], help="requests per execute()")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--clips", choices=("same", "mixed"), default="same",
                        help="B copies of one clip, or the dev clips cycled")
    parser.add_argument("--json", action="store_true", help="print one JSON object per batch size")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    clips = [load_clip(c) for c in (CLIPS if args.clips == "mixed" else CLIPS[3:4])]
    runner = large_runner(max(args.batch))
    params = sum(p.numel() for p in runner.ckpt.model.parameters())
    logger.info("paraformer-large shape: %.1f M parameters, %d torch threads", params / 1e6, args.threads)
    run_batch(runner, clips[:1])  # warm-up: allocator, kernels
    logger.info("clips: %s", args.clips)
    for b in args.batch:
        audios = list(itertools.islice(itertools.cycle(clips), b))
        seconds = sum(len(a) for a in audios) / 16000
        wall, cpu, tokens = run_batch(runner, audios)
        row = {"batch": b, "audio_s": round(seconds, 1), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
               "rtfx_wall": round(seconds / wall, 1), "rtfx_cpu": round(seconds / cpu, 1), "tokens": tokens}
        print(json.dumps(row) if args.json else
              f"batch {b:3d}: {seconds:6.1f} s audio in {wall:6.2f} s wall ({row['rtfx_wall']:6.1f}x), "
              f"{cpu:6.2f} s CPU ({row['rtfx_cpu']:6.1f}x), {tokens} tokens")  # fmt: skip


if __name__ == "__main__":
    main()
