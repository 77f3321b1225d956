"""What `/v1/models` shows for a Zipformer checkpoint: sizes, the chunk geometry in use and the
trained choices, and the capabilities admission enforces. All of it follows from model_args.json,
the vocabulary and the engine's settings, so the runner's `info()` and `describe` (before any load)
report it through `model_info`. Torch-free (the per-stream state's bytes, which depend on the
dtype the load picks, are the runner's own detail)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.capabilities import Capabilities
from engine.config import EngineConfig
from engine.models.zipformer.config import ZipformerConfig
from engine.models.zipformer.geometry import StreamGeometry
from engine.models.zipformer.options import ZipformerOptions
from engine.runner import ModelInfo

MAX_BEAM = 16
"""Widest hypothesis set served (icefall's recipes decode with 4)."""
DECODE_METHODS = ("greedy_search",)
SAMPLE_RATE = 16000
"""Hz: icefall's LibriSpeech recipes' fbank rate."""
FEATURE_SECONDS = 0.01
ENCODER_SUBSAMPLING = 4
"""Feature frames per encoder frame (2 in the subsampler, 2 in the output downsampling)."""
FRAME_SECONDS = FEATURE_SECONDS * ENCODER_SUBSAMPLING
"""Seconds per encoder output frame."""


def capabilities(can_encode: bool) -> Capabilities:
    """Greedy or modified beam search (n-best), per-token log-probabilities, word times from
    token frames; keywords need the BPE model to spell them in pieces (not tokens.txt alone)."""
    return Capabilities(max_beam_size=MAX_BEAM, max_n_best=MAX_BEAM, keywords=can_encode, logprobs=True,
                        word_timestamps=True)  # fmt: skip


def model_name(ckpt_dir: str) -> str:
    """What /v1/models calls a checkpoint: its directory's name."""
    return Path(ckpt_dir).name


def model_info(cfg: ZipformerConfig, name: str, can_encode: bool, geo: StreamGeometry | None,
               options: ZipformerOptions, parameters: int = 0) -> ModelInfo:  # fmt: skip
    """The runner's `info()` (less its state bytes) and, with `parameters` 0, `describe`'s."""
    streaming: dict[str, Any] = {
        "style": "chunked" if geo else "none",
        "trained_chunk_sizes": list(cfg.streaming_chunks),
        "trained_left_context_frames": list(cfg.streaming_lefts),
    }
    if geo is not None:
        streaming.update(chunk_size=geo.chunk, left_context_frames=geo.left, chunk_ms=geo.chunk * 20,
                         encoder_frames_per_chunk=geo.out_frames, lookahead_ms=geo.lookahead_frames * 10)  # fmt: skip
    return ModelInfo(
        family="zipformer",
        model=name,
        sample_rate=SAMPLE_RATE,
        languages=(options.language,) if options.language else (),
        supports_streaming=geo is not None,
        streaming_styles=("chunked",) if geo else (),
        decode_methods=DECODE_METHODS,
        decode_method=DECODE_METHODS[0],
        capabilities=capabilities(can_encode),
        checkpoint_format="icefall",
        parameters=parameters,
        details={
            "architecture": "zipformer2-transducer" + ("-causal" if cfg.causal else ""),
            "stacks": cfg.num_stacks,
            "layers": list(cfg.num_encoder_layers),
            "encoder_dim": list(cfg.encoder_dim),
            "downsampling_factor": list(cfg.downsampling_factor),
            "context_size": cfg.context_size,
            "vocab_size": cfg.vocab_size,
            "frame_ms": round(FRAME_SECONDS * 1000),
            "stream_settings": streaming,
            "max_streams": options.max_streams,
        },
    )


def describe(config: EngineConfig, options: ZipformerOptions) -> ModelInfo:
    """The family's `describe`: model_args.json and the vocabulary, no weights. An `epoch-N.pt`
    without model_args.json records its arguments inside the checkpoint: that one is opened with
    torch, its tensors memory-mapped and left unread."""
    from engine.errors import CheckpointError
    from engine.models.zipformer.files import ARGS_FILE, read_config, weights_file
    from engine.models.zipformer.geometry import select_geometry
    from engine.models.zipformer.tokenizer import Tokenizer

    ckpt_dir = config.resolved_ckpt_dir()
    weights = weights_file(ckpt_dir, config.checkpoint_name)
    if weights is None:
        raise CheckpointError(f"{ckpt_dir}: no pretrained.pt or epoch-N.pt")
    tokenizer = Tokenizer.from_dir(ckpt_dir)
    recorded = None
    if not (Path(ckpt_dir) / ARGS_FILE).is_file():
        recorded = (_recorded_arguments(Path(ckpt_dir) / weights), Path(ckpt_dir) / weights)
    cfg, _ = read_config(ckpt_dir, tokenizer, recorded)
    geo = select_geometry(cfg, config.chunk_size, config.num_left_chunks)
    return model_info(cfg, model_name(ckpt_dir), tokenizer.sp is not None, geo, options)


def _recorded_arguments(path: Path) -> dict[str, Any]:
    import torch

    from engine.errors import CheckpointError

    try:
        blob = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot be read as a torch checkpoint: {exc}") from exc
    if not isinstance(blob, dict):
        raise CheckpointError(f"{path}: expected icefall's {{'model': state_dict, ...}}")
    return {k: v for k, v in blob.items() if k != "model"}
