"""What `/v1/models` shows for a NeMo checkpoint: family, architecture, sizes, the streaming style
with its trained look-aheads or buffered presets, and the decode methods.

All of it follows from model_config.yaml and the engine's settings (`NemoSettings`), so the runner
and `describe` (before any load) report it through one function, `model_info`. Torch-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from engine.capabilities import Capabilities
from engine.config import EngineConfig
from engine.models.nemo.config import ModelConfig
from engine.models.nemo.options import (
    MAX_WINDOW_FRAMES,
    NemoOptions,
    buffered_presets,
    check_stream_context,
    delay_preset,
    select_look_ahead,
)
from engine.runner import ModelInfo
from engine.types import DELAYS

MAX_CTC_BEAM = 10
"""Widest CTC prefix beam (and n-best list) a NeMo CTC head serves."""
MAX_TRANSDUCER_BEAM = 16
"""Widest transducer beam (malsd_batch) served: the search's cost grows with K^2 candidates per step."""
DEFAULT_BUFFERED_CONTEXT = (70, 13, 13)
"""Buffered window (left, chunk, right) in encoder frames when the checkpoint lists no trained choices."""


def decode_methods(cfg: ModelConfig) -> tuple[str, ...]:
    """The heads the checkpoint has, the default first: a hybrid's transducer, then its CTC head."""
    return tuple(m for m, present in (("rnnt", cfg.transducer), ("ctc", cfg.ctc_classes)) if present)


def max_beam(method: str) -> int:
    """CTC heads (prefix beam search) and transducers (malsd_batch, RNN-T and TDT) beam-search,
    with keyword biasing."""
    return MAX_CTC_BEAM if method == "ctc" else MAX_TRANSDUCER_BEAM


def capabilities(beam: int, streaming_kind: str | None, presets: bool) -> Capabilities:
    """Beam search (`beam` > 1) brings n-best lists and keyword biasing; only buffered streaming
    takes a per-stream (left, chunk, right) window, and a `delay` when its trained choices give
    named presets (cache-aware streaming runs its one look-ahead)."""
    buffered = streaming_kind == "buffered"
    return Capabilities(max_beam_size=beam, max_n_best=beam, keywords=beam > 1, logprobs=True,
                        word_timestamps=True, stream_context=buffered, delay=buffered and presets)


@dataclass(frozen=True)
class NemoSettings:
    """How a runner serves this checkpoint under `EngineConfig` and `NemoOptions`: decided from the
    configuration alone (no weights), so a runner and `describe` cannot differ."""

    name: str
    """The checkpoint's file name without its directory or extension (what /v1/models shows)."""
    method: str
    """The decoder in use (EngineConfig.decode_method, else the checkpoint's first head); the runner
    refuses one the checkpoint lacks."""
    streaming_kind: str | None
    """'cache_aware', 'buffered', or None (offline only)."""
    look_ahead: tuple[int, int] | None
    """Cache-aware: the trained [left, right] look-ahead in use."""
    presets: list[tuple[int, int, int]]
    default_context: tuple[int, int, int]
    planned_blocks: int
    """Cache-aware: the KV blocks the pool is planned with (max_num_blocks, else a block table per
    stream); 0 without a pool."""
    blocks_per_stream: int
    max_streams: int
    """Rows of the per-stream state slots (cache-aware: no more than the pool's blocks hold)."""
    language: str = ""
    """NemoOptions.language: the one language declared ('' none)."""

    @property
    def kv_blocks(self) -> int:
        return self.max_streams * self.blocks_per_stream

    @classmethod
    def of(cls, path: str, cfg: ModelConfig, config: EngineConfig, options: NemoOptions) -> NemoSettings:
        enc = cfg.encoder
        look_ahead = None
        kind = None
        if enc.att_context_style == "chunked_limited":
            look_ahead = select_look_ahead(enc, config.chunk_size, config.num_left_chunks)
            kind = None if cfg.mel.per_feature else "cache_aware"  # per_feature needs the whole utterance
        elif enc.att_context_style == "chunked_limited_with_rc":
            kind = "buffered"
        presets = buffered_presets(enc)
        default = options.stream_context or (delay_preset(presets, "medium") if presets else DEFAULT_BUFFERED_CONTEXT)
        if kind == "buffered":
            check_stream_context(enc, default)
        max_streams, planned, per_stream = options.max_streams, 0, 0
        if kind == "cache_aware" and look_ahead is not None:
            per_stream = look_ahead[0] // (look_ahead[1] + 1) + 1  # the left chunks plus the one written
            planned = config.max_num_blocks or max_streams * per_stream
            max_streams = min(max_streams, planned // per_stream)
        return cls(name=os.path.splitext(os.path.basename(path))[0], method=config.decode_method or decode_methods(cfg)[0],
                   streaming_kind=kind, look_ahead=look_ahead, presets=presets, default_context=default,
                   planned_blocks=planned, blocks_per_stream=per_stream, max_streams=max_streams,
                   language=options.language)  # fmt: skip


def look_ahead_entry(left: int, right: int, frame_ms: float) -> dict[str, Any]:
    return {
        "att_context_size": [left, right],
        "chunk_size": right + 1,
        "num_left_chunks": -1 if left < 0 else left // (right + 1),
        "chunk_ms": round((right + 1) * frame_ms),
    }


def frame_seconds(cfg: ModelConfig) -> float:
    """Seconds per encoder frame (the mel hop times the subsampling)."""
    return cfg.mel.hop_length / cfg.mel.sample_rate * cfg.encoder.subsampling_factor


def model_info(cfg: ModelConfig, s: NemoSettings, parameters: int = 0) -> ModelInfo:
    """The runner's `info()` and, with `parameters` 0, `describe`'s: everything here is configuration."""
    enc = cfg.encoder
    frame_ms = frame_seconds(cfg) * 1000
    streaming: dict[str, Any] = {"style": s.streaming_kind or "none", "att_context_style": enc.att_context_style}
    if enc.att_context_style == "chunked_limited":
        streaming["look_aheads"] = [look_ahead_entry(a[0], a[1], frame_ms) for a in enc.att_context_sizes]
        if s.look_ahead is not None:
            streaming["look_ahead"] = look_ahead_entry(*s.look_ahead, frame_ms)
    if s.streaming_kind == "buffered":
        choices = enc.att_chunk_context_size
        streaming.update(
            presets=[list(p) for p in s.presets],
            default_preset=list(s.default_context),
            delays={d: list(delay_preset(s.presets, d)) for d in DELAYS} if s.presets else {},
            trained_choices=None if choices is None else {"left": list(choices[0]), "chunk": list(choices[1]),
                                                          "right": list(choices[2])},
            max_window_frames=MAX_WINDOW_FRAMES,
        )  # fmt: skip
    beam = max_beam(s.method)
    return ModelInfo(
        family="nemo",
        model=s.name,
        sample_rate=cfg.mel.sample_rate,
        languages=(s.language,) if s.language else (),
        supports_streaming=s.streaming_kind is not None,
        streaming_styles=(s.streaming_kind,) if s.streaming_kind else (),
        decode_methods=decode_methods(cfg),
        decode_method=s.method,
        capabilities=capabilities(beam, s.streaming_kind, bool(s.presets)),
        checkpoint_format="nemo",
        parameters=parameters,
        details={
            "architecture": f"fastconformer-{cfg.architecture}"
            + ("-tdt" if cfg.transducer and cfg.transducer.durations else ""),
            "checkpoint_name": s.name,
            "layers": enc.n_layers,
            "d_model": enc.d_model,
            "subsampling_factor": enc.subsampling_factor,
            "frame_ms": frame_ms,
            "vocab_size": cfg.transducer.vocab_size if cfg.transducer else (cfg.ctc_classes or 1) - 1,
            "stream_settings": streaming,
            "max_streams": s.max_streams,
            "kv_blocks": s.kv_blocks,
            "max_beam_size": beam,
        },
    )


def describe(config: EngineConfig, options: NemoOptions) -> ModelInfo:
    """The family's `describe`: model_config.yaml alone (from the `.nemo` tar, or the unpacked
    layout's own file), no weights read."""
    from engine.models.nemo import native
    from engine.models.nemo.archive import find_checkpoint, read_archive_config
    from engine.models.nemo.config import parse_config

    ckpt_dir = config.resolved_ckpt_dir()
    if config.checkpoint_name is None and native.is_native(ckpt_dir):
        path, raw = native.read_config(ckpt_dir)
    else:
        path = find_checkpoint(ckpt_dir, config.checkpoint_name)
        raw = read_archive_config(path)
    cfg = parse_config(raw)
    return model_info(cfg, NemoSettings.of(path, cfg, config, options))
