"""`describe` (config.json and the weight files' names only) reports what a loaded Qwen3-ASR runner
does (the contract fixture is Qwen2-Audio), with non-default options."""

from __future__ import annotations

from pathlib import Path

from engine.cache.block_pool import POOL_DETAILS
from engine.config import EngineConfig
from engine.families import family_options
from engine.models.speechllm import FAMILY
from engine.runner import ModelInfo

QWEN3 = Path(__file__).resolve().parents[2] / "fixtures" / "speechllm" / "qwen3_asr"


def test_qwen3_asr_is_described_as_loaded() -> None:
    config = EngineConfig(ckpt_dir=str(QWEN3), max_num_blocks=64, block_size_frames=32,
                          family_options={"speechllm": {"max_beam_size": 3, "max_new_tokens": 12}})
    opts = family_options(FAMILY, config.family_options)
    described = FAMILY.describe(config, opts)  # type: ignore[misc]
    loaded = FAMILY.build(config, opts).info()
    details = {k: v for k, v in loaded.details.items() if k not in POOL_DETAILS}  # planned at load
    assert described == ModelInfo(**{**vars(loaded), "parameters": 0, "details": details})
    assert described.checkpoint_format == "transformers/qwen3_asr" and described.capabilities.max_beam_size == 3
