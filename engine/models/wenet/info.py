"""What `/v1/models` shows for a WeNet checkpoint: sizes, chunk geometry, decode methods. All but
the KV pool's block count (planned from memory at load) follows from train.yaml, units.txt, the
engine's settings and whether the state dict holds an attention decoder, so the runner's `info()`
and `describe` (before any load) report it through `model_info`. Torch-free."""

from __future__ import annotations

import os

from engine.capabilities import Capabilities
from engine.config import EngineConfig
from engine.languages import vocabulary_language
from engine.models.wenet.config import ConformerConfig
from engine.models.wenet.options import WenetOptions
from engine.runner import ModelInfo

MAX_CTC_BEAM = 10
CTC = "ctc"
"""Decode method: CTC greedy, or CTC prefix beam search for beam requests."""
ATTENTION_RESCORING = "attention_rescoring"
"""Decode method: CTC prefix beam, then the n-best reordered by the attention decoder (needs one)."""
CAPABILITIES = Capabilities(max_beam_size=MAX_CTC_BEAM, max_n_best=MAX_CTC_BEAM, keywords=True, word_timestamps=True)


def decode_methods(has_decoder: bool) -> tuple[str, ...]:
    """The methods offered, the default last (rescoring when there is a decoder)."""
    return (CTC, ATTENTION_RESCORING) if has_decoder else (CTC,)


def decode_method(config: EngineConfig, has_decoder: bool) -> str:
    """The method in use: EngineConfig.decode_method, else the default (one not offered is the
    engine's to refuse)."""
    return config.decode_method or decode_methods(has_decoder)[-1]


def model_info(cfg: ConformerConfig, sample_rate: int, frame_seconds: float, weights_path: str, has_decoder: bool,
               config: EngineConfig, parameters: int = 0, language: str | None = None) -> ModelInfo:  # fmt: skip
    """The runner's `info()` less its KV pool's block count and, with `parameters` 0, `describe`'s.
    `language`: the one the checkpoint transcribes (WenetOptions.language, else its units')."""
    return ModelInfo(
        family="wenet",
        model=f"conformer-ctc-{cfg.num_blocks}x{cfg.output_size}",
        sample_rate=sample_rate,
        languages=(language,) if language else (),
        supports_streaming=True,
        streaming_styles=("chunked",),
        decode_methods=decode_methods(has_decoder),
        decode_method=decode_method(config, has_decoder),
        capabilities=CAPABILITIES,
        checkpoint_format="wenet",
        parameters=parameters,
        details={
            "architecture": "conformer-ctc (U2/U2++)",
            "checkpoint_name": os.path.basename(weights_path),
            "layers": cfg.num_blocks,
            "d_model": cfg.output_size,
            "vocab_size": cfg.vocab_size,
            "chunk_size": config.chunk_size,
            "chunk_ms": config.chunk_size * frame_seconds * 1000,
            "num_left_chunks": config.num_left_chunks,
            "kv_block_frames": config.block_size_frames or config.chunk_size,
            "max_beam_size": MAX_CTC_BEAM,
            "keywords": True,
        },
    )


def describe(config: EngineConfig, options: WenetOptions) -> ModelInfo:
    """The family's `describe`: train.yaml, units.txt, and the state dict's key names (to know
    whether it holds an attention decoder; memory-mapped, no tensor read, for a zip-format file)."""
    from engine.models.wenet.checkpoint import state_dict_keys
    from engine.models.wenet.config import DECODER_PREFIX, read_configuration, require_weights, rescores_with

    ckpt_dir = config.resolved_ckpt_dir()
    read = read_configuration(ckpt_dir)
    weights = require_weights(ckpt_dir, config.checkpoint_name)
    has_decoder = rescores_with(read.raw) and any(k.startswith(DECODER_PREFIX) for k in state_dict_keys(weights))
    return model_info(read.encoder, read.frontend.sample_rate, read.frontend.frame_seconds, weights, has_decoder,
                      config, language=options.language or vocabulary_language(read.units))
