"""What `/v1/models` shows for a Paraformer checkpoint, offline or paraformer-online: every fact
follows from config.yaml, the token list and the family's options, so the runners' `info()` and
`describe` (before any load) report it through the one function each. Torch-free."""

from __future__ import annotations

import dataclasses
import os

from engine.capabilities import Capabilities
from engine.config import EngineConfig
from engine.models.paraformer.config import ParaformerConfig
from engine.models.paraformer.options import ParaformerOptions
from engine.runner import ModelInfo

DECODE_METHOD = "paraformer"
"""The one decoder: CIF-predicted token count, one parallel pass, argmax per token."""
OFFLINE_CAPABILITIES = Capabilities(logprobs=True, word_timestamps=True)
"""Greedy only (FunASR's beam search needs a CTC or LM scorer these checkpoints lack), no
prompt, no sampling, no language choice; keywords only with SeACo's bias decoder."""
ONLINE_CAPABILITIES = Capabilities(logprobs=True)
"""Greedy only, no keywords (paraformer-online has no SeACo module), no word times (FunASR's
streaming model reports none)."""


def _checkpoint_details(cfg: ParaformerConfig, weights_path: str) -> dict[str, object]:
    """The details both runners show of the checkpoint's sizes."""
    return {
        "checkpoint_name": os.path.basename(weights_path),
        "encoder_layers": cfg.encoder.num_blocks,
        "decoder_layers": cfg.decoder.num_blocks,
        "d_model": cfg.encoder.output_size,
        "vocab_size": cfg.decoder.vocab_size,
        "lfr": [cfg.frontend.lfr_m, cfg.frontend.lfr_n],
    }


def offline_info(cfg: ParaformerConfig, weights_path: str, tokenizer: str, options: ParaformerOptions,
                 parameters: int = 0) -> ModelInfo:  # fmt: skip
    """The offline runner's `info()` (`tokenizer`: 'sentencepiece' or 'char')."""
    seaco = cfg.seaco is not None
    return ModelInfo(
        family="paraformer",
        model=f"{'seaco-' if seaco else ''}paraformer-{cfg.encoder.num_blocks}x{cfg.encoder.output_size}",
        sample_rate=cfg.frontend.sample_rate,
        languages=tuple(options.languages),
        supports_streaming=False,
        decode_methods=(DECODE_METHOD,),
        decode_method=DECODE_METHOD,
        capabilities=dataclasses.replace(OFFLINE_CAPABILITIES, keywords=seaco),
        checkpoint_format="funasr",
        parameters=parameters,
        details={
            "architecture": "paraformer (san-m encoder, cif predictor, non-autoregressive decoder)",
            **_checkpoint_details(cfg, weights_path),
            "frame_ms": round(cfg.frontend.frame_seconds * 1000),
            "max_segment_seconds": options.max_segment_seconds,
            "keywords": seaco,
            "tokenizer": tokenizer,
            "contextual": "seaco" if seaco else None,
        },
    )


def online_info(cfg: ParaformerConfig, weights_path: str, tokenizer: str, options: ParaformerOptions,
                parameters: int = 0) -> ModelInfo:  # fmt: skip
    """The paraformer-online runner's `info()`: its chunk geometry is the options'."""
    left, chunk, ahead = options.chunk_size
    frame_ms = cfg.frontend.frame_seconds * 1000
    return ModelInfo(
        family="paraformer",
        model=f"paraformer-online-{cfg.encoder.num_blocks}x{cfg.encoder.output_size}",
        sample_rate=cfg.frontend.sample_rate,
        languages=tuple(options.languages),
        supports_streaming=True,
        streaming_styles=("chunked",),
        decode_methods=(DECODE_METHOD,),
        decode_method=DECODE_METHOD,
        capabilities=ONLINE_CAPABILITIES,
        checkpoint_format="funasr",
        parameters=parameters,
        details={
            "architecture": "paraformer-online (chunked san-m encoder, cif across chunks, "
                            "non-autoregressive decoder)",
            **_checkpoint_details(cfg, weights_path),
            "frame_ms": round(frame_ms),
            "chunk_size": [left, chunk, ahead],
            "chunk_ms": round(chunk * frame_ms),
            "look_ahead_ms": round(ahead * frame_ms),
            "encoder_chunk_look_back": options.encoder_chunk_look_back,
            "decoder_chunk_look_back": options.decoder_chunk_look_back,
            "tokenizer": tokenizer,
            "max_streams": options.max_streams,
        },
    )


def describe(config: EngineConfig, options: ParaformerOptions) -> ModelInfo:
    """The family's `describe`: config.yaml and the token list (or the SentencePiece model it
    names), no weights; online or offline as the family's build picks (config.yaml's model class)."""
    from engine.models.paraformer.files import WEIGHTS_FILE, read_configuration
    from engine.models.paraformer.spelling import Spelling

    conf = read_configuration(config.resolved_ckpt_dir())
    info = online_info if conf.config.online else offline_info
    return info(conf.config, config.checkpoint_name or WEIGHTS_FILE, Spelling(conf.tokens, conf.sentencepiece).kind,
                options)
