"""What `/v1/models` shows for a Zipformer checkpoint: sizes, the chunk geometry in use and the
trained choices, the per-stream state, and the capabilities admission enforces."""

from __future__ import annotations

from typing import Any, Protocol

from torch import nn

from engine.capabilities import Capabilities
from engine.models.zipformer.beam import MAX_BEAM
from engine.models.zipformer.checkpoint import ZipformerCheckpoint
from engine.models.zipformer.geometry import StreamGeometry
from engine.models.zipformer.options import ZipformerOptions
from engine.models.zipformer.streaming import CacheSlots
from engine.runner import ModelInfo


class DescribedRunner(Protocol):
    """What `describe` reads of a Zipformer runner (a Protocol, so this module need not import it)."""

    ckpt: ZipformerCheckpoint
    geometry: StreamGeometry | None
    options: ZipformerOptions
    slots: CacheSlots
    model: nn.Module
    sample_rate: int
    supports_streaming: bool
    frame_seconds: float

def capabilities(can_encode: bool) -> Capabilities:
    """Greedy or modified beam search (n-best), per-token log-probabilities, word times from
    token frames; keywords need the BPE model to spell them in pieces (not tokens.txt alone)."""
    return Capabilities(max_beam_size=MAX_BEAM, max_n_best=MAX_BEAM, keywords=can_encode, logprobs=True,
                        word_timestamps=True)  # fmt: skip


def describe(runner: DescribedRunner) -> ModelInfo:
    cfg = runner.ckpt.config
    geo = runner.geometry
    streaming: dict[str, Any] = {
        "style": "chunked" if geo else "none",
        "trained_chunk_sizes": list(cfg.streaming_chunks),
        "trained_left_context_frames": list(cfg.streaming_lefts),
    }
    if geo is not None:
        streaming.update(chunk_size=geo.chunk, left_context_frames=geo.left, chunk_ms=geo.chunk * 20,
                         encoder_frames_per_chunk=geo.out_frames, lookahead_ms=geo.lookahead_frames * 10,
                         state_bytes_per_stream=runner.slots.bytes_per_stream())  # fmt: skip
    return ModelInfo(
        family="zipformer",
        model=runner.ckpt.name,
        sample_rate=runner.sample_rate,
        languages=(runner.options.language,) if runner.options.language else (),
        supports_streaming=runner.supports_streaming,
        streaming_styles=("chunked",) if geo else (),
        decode_methods=("greedy_search",),
        decode_method="greedy_search",
        capabilities=capabilities(runner.ckpt.tokenizer.sp is not None),
        checkpoint_format="icefall",
        parameters=sum(p.numel() for p in runner.model.parameters()),
        details={
            "architecture": "zipformer2-transducer" + ("-causal" if cfg.causal else ""),
            "stacks": cfg.num_stacks,
            "layers": list(cfg.num_encoder_layers),
            "encoder_dim": list(cfg.encoder_dim),
            "downsampling_factor": list(cfg.downsampling_factor),
            "context_size": cfg.context_size,
            "vocab_size": cfg.vocab_size,
            "frame_ms": round(runner.frame_seconds * 1000),
            "stream_settings": streaming,
            "max_streams": runner.slots.num_slots,
        },
    )
