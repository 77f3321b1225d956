"""What `/v1/models` shows for a NeMo checkpoint: family, architecture, sizes, the streaming style
with its trained look-aheads or buffered presets, and the decode methods."""

from __future__ import annotations

from typing import Any, Protocol

from engine.cache.block_pool import BlockPool
from engine.capabilities import Capabilities
from engine.models.nemo.checkpoint import NemoCheckpoint
from engine.models.nemo.options import MAX_WINDOW_FRAMES, delay_preset
from engine.models.nemo.state_slots import StateSlots
from engine.runner import ModelInfo
from engine.types import DELAYS

MAX_CTC_BEAM = 10
"""Widest CTC prefix beam (and n-best list) a NeMo CTC head serves."""
MAX_TRANSDUCER_BEAM = 16
"""Widest transducer beam (malsd_batch) served: the search's cost grows with K^2 candidates per step."""


class DescribedRunner(Protocol):
    """What `describe` reads of a NeMo runner (a Protocol, so this module need not import it)."""

    ckpt: NemoCheckpoint
    sample_rate: int
    supports_streaming: bool
    frame_seconds: float
    method: str
    max_beam: int
    streaming_kind: str | None
    look_ahead: tuple[int, int] | None
    presets: list[tuple[int, int, int]]
    default_context: tuple[int, int, int]
    slots: StateSlots
    pool: BlockPool | None


def max_beam(method: str) -> int:
    """CTC heads (prefix beam search) and transducers (malsd_batch, RNN-T and TDT) beam-search,
    with keyword biasing."""
    return MAX_CTC_BEAM if method == "ctc" else MAX_TRANSDUCER_BEAM


def capabilities(beam: int, streaming_kind: str | None) -> Capabilities:
    """Beam search (`beam` > 1) brings n-best lists and keyword biasing; only buffered streaming
    takes a per-stream (left, chunk, right) window."""
    return Capabilities(max_beam_size=beam, max_n_best=beam, keywords=beam > 1, logprobs=True,
                        word_timestamps=True, stream_context=streaming_kind == "buffered")


def look_ahead_entry(left: int, right: int, frame_ms: float) -> dict[str, Any]:
    return {
        "att_context_size": [left, right],
        "chunk_size": right + 1,
        "num_left_chunks": -1 if left < 0 else left // (right + 1),
        "chunk_ms": round((right + 1) * frame_ms),
    }


def describe(runner: DescribedRunner) -> ModelInfo:
    ckpt = runner.ckpt
    cfg = ckpt.config
    enc = cfg.encoder
    frame_ms = runner.frame_seconds * 1000
    methods = [m for m, present in (("rnnt", cfg.transducer), ("ctc", cfg.ctc_classes)) if present]
    streaming: dict[str, Any] = {"style": runner.streaming_kind or "none",
                                 "att_context_style": enc.att_context_style}  # fmt: skip
    if enc.att_context_style == "chunked_limited":
        streaming["look_aheads"] = [look_ahead_entry(s[0], s[1], frame_ms) for s in enc.att_context_sizes]
        if runner.look_ahead is not None:
            streaming["look_ahead"] = look_ahead_entry(*runner.look_ahead, frame_ms)
    if runner.streaming_kind == "buffered":
        choices = enc.att_chunk_context_size
        streaming.update(
            presets=[list(p) for p in runner.presets],
            default_preset=list(runner.default_context),
            delays={d: list(p) for d in DELAYS if runner.presets for p in [_delay(runner, d)]},
            trained_choices=None if choices is None else {"left": list(choices[0]), "chunk": list(choices[1]),
                                                          "right": list(choices[2])},
            max_window_frames=MAX_WINDOW_FRAMES,
        )  # fmt: skip
    return ModelInfo(
        family="nemo",
        model=ckpt.name,
        sample_rate=runner.sample_rate,
        supports_streaming=runner.supports_streaming,
        streaming_styles=(runner.streaming_kind,) if runner.streaming_kind else (),
        decode_methods=tuple(methods),
        decode_method=runner.method,
        capabilities=capabilities(runner.max_beam, runner.streaming_kind),
        checkpoint_format="nemo",
        parameters=sum(p.numel() for p in ckpt.model.parameters()),
        details={
            "architecture": f"fastconformer-{cfg.architecture}"
            + ("-tdt" if cfg.transducer and cfg.transducer.durations else ""),
            "checkpoint_name": ckpt.name,
            "layers": enc.n_layers,
            "d_model": enc.d_model,
            "subsampling_factor": enc.subsampling_factor,
            "frame_ms": frame_ms,
            "vocab_size": cfg.transducer.vocab_size if cfg.transducer else (cfg.ctc_classes or 1) - 1,
            "stream_settings": streaming,
            "max_streams": runner.slots.num_slots,
            "kv_blocks": runner.pool.num_blocks if runner.pool else 0,
            "max_beam_size": runner.max_beam,
        },
    )


def _delay(runner: DescribedRunner, delay: str) -> tuple[int, int, int]:
    return delay_preset(runner.presets, delay)  # type: ignore[arg-type]
