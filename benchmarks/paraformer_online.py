"""paraformer-online throughput: live streams one CPU core sustains, at 1, 8 and 32 concurrent
streams advanced together.

Builds a model sized like FunASR's paraformer-zh-streaming (chunked SAN-M encoder 50 blocks of
d_model 512, 4 heads, FFN 2048, FSMN kernel 11; decoder 16 blocks, all cross-attending, causal
FSMN kernel 11 shift 5; vocabulary 8404; LFR 7/6 over 80 mels) with random weights (nothing can
be downloaded here), and runs S live streams through the runner's real path: every step feeds
each stream one 600 ms chunk of audio (FunASR's chunk_size [0, 10, 5], look-backs 4 and 1), then
one `execute()` featurizes, encodes, integrates and decodes all of them in one batch. The last
step of each stream is its final chunk.

Reported per stream count: CPU RTFx (audio seconds per process-CPU second: with one torch thread,
the number of real-time streams one core keeps up with) and its ratio to one stream, and the
mean CPU time of a step. A random model fires a token count set by its random CIF weights, not by
speech; the decoder's share of the time is therefore only indicative.

    python -m benchmarks.paraformer_online --streams 1 8 32 --chunks 6 --threads 1
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np
import torch

from benchmarks.paraformer_rtf import LARGE, VOCAB
from engine.config import EngineConfig
from engine.models.paraformer.checkpoint import ParaformerCheckpoint
from engine.models.paraformer.config import parse_config
from engine.models.paraformer.model import Paraformer
from engine.models.paraformer.online_runner import ParaformerOnlineRunner
from engine.request import Request
from engine.types import DecodingOptions
from tests.conftest import load_clip

logger = logging.getLogger("paraformer_online")

CLIP = "mfa_um"  # about 9 s: streams start at different offsets into it
ONLINE = {
    **LARGE,
    "model": "ParaformerStreaming",
    "encoder": "SANMEncoderChunkOpt",
    "encoder_conf": {**LARGE["encoder_conf"], "input_layer": "pe_online"},
    "decoder_conf": {**LARGE["decoder_conf"], "sanm_shfit": 5},
    "frontend": "WavFrontendOnline",
}
"""paraformer-zh-streaming's config.yaml, the parts the runtime reads."""


def online_runner(max_batch: int) -> ParaformerOnlineRunner:
    torch.manual_seed(0)
    cfg = parse_config(ONLINE, VOCAB)
    model = Paraformer(cfg).eval()
    with torch.no_grad():  # a CIF weight near 0.3 per 60 ms frame: about 5 tokens a second
        model.predictor.cif_output.bias.fill_(-0.85)
    dim = cfg.encoder.input_size
    ckpt = ParaformerCheckpoint(model, cfg, [f"t{i}" for i in range(VOCAB)], (torch.zeros(dim), torch.ones(dim)),
                                "model.pt", "ParaformerStreaming")  # fmt: skip
    config = EngineConfig(max_batch_size=max_batch, device="cpu")
    return ParaformerOnlineRunner(ckpt, config, torch.device("cpu"))


def run_streams(runner: ParaformerOnlineRunner, audio: np.ndarray, streams: int, chunks: int) -> dict[str, float]:
    """S streams of `chunks` chunks each, one chunk per stream per step; CPU and wall of the steps."""
    stride = runner.stream_chunk_samples
    offsets = [(i * 7 * stride // 3) % max(len(audio) - chunks * stride, 1) for i in range(streams)]
    reqs = [Request(f"s{i}", streaming=True, decoding=DecodingOptions(), sample_rate=16000) for i in range(streams)]
    runner.admit(reqs)
    cpu = wall = 0.0
    steps = tokens = 0
    for c in range(chunks):
        for req, off in zip(reqs, offsets, strict=True):
            req.append_audio(audio[off + c * stride : off + (c + 1) * stride])
            req.input_finished = c == chunks - 1
        while runner.has_work():
            w, t = time.perf_counter(), time.process_time()
            outs = runner.execute()
            cpu += time.process_time() - t
            wall += time.perf_counter() - w
            steps += 1
            tokens += sum(len(o.tokens) for o in outs if o.finished)
    assert runner.stats().streams == 0
    seconds = streams * chunks * stride / 16000
    return {"streams": streams, "audio_s": round(seconds, 1), "steps": steps, "cpu_s": round(cpu, 2),
            "wall_s": round(wall, 2), "rtfx_cpu": round(seconds / cpu, 2), "step_cpu_ms": round(1000 * cpu / steps, 1),
            "tokens": tokens}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32], help="concurrent streams")
    parser.add_argument("--chunks", type=int, default=6, help="600 ms chunks per stream")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object per stream count")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    audio = load_clip(CLIP)
    runner = online_runner(max(args.streams))
    params = sum(p.numel() for p in runner.ckpt.model.parameters())
    logger.info("paraformer-online shape: %.1f M parameters, %d torch threads", params / 1e6, args.threads)
    run_streams(runner, audio, 1, 2)  # warm-up: allocator, kernels
    base = None
    for s in args.streams:
        row = run_streams(runner, audio, s, args.chunks)
        base = base or row["rtfx_cpu"]
        row["vs_one_stream"] = round(row["rtfx_cpu"] / base, 2)
        print(json.dumps(row) if args.json else
              f"{s:3d} streams: {row['audio_s']:6.1f} s audio, {row['steps']} steps of {row['step_cpu_ms']:7.1f} ms "
              f"CPU: {row['rtfx_cpu']:6.2f}x real time per CPU-second ({row['vs_one_stream']:.2f}x one stream's)")  # fmt: skip


if __name__ == "__main__":
    main()
