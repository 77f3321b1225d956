"""Whisper family: CTranslate2 / OpenAI / Hugging Face checkpoints, offline and streaming."""

from __future__ import annotations

from engine.config import EngineConfig
from engine.models.whisper.loader import detect_format
from engine.registry import ModelFamily, register
from engine.runner import ModelRunner


def _build(config: EngineConfig) -> ModelRunner:
    from engine.models.whisper.runner import WhisperRunner

    return WhisperRunner(config)


FAMILY = register(ModelFamily(name="whisper", detect=lambda d: detect_format(d) is not None, build=_build))
