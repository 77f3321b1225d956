"""The engine the speech-LLM tests drive: the Transformers-written Qwen2-Audio fixture, offline."""

from __future__ import annotations

from pathlib import Path

from engine import ASREngine, EngineConfig
from engine.models.speechllm.runner import SpeechLLMRunner

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "speechllm" / "qwen2_audio"


def fixture_engine(max_new_tokens: int, **options: object) -> ASREngine:
    """An offline engine on the fixture, generating at most `max_new_tokens`; `options` are more
    speech-LLM family options."""
    return ASREngine(EngineConfig(ckpt_dir=str(FIXTURE), service_mode="offline",
                                  family_options={"speechllm": {"max_new_tokens": max_new_tokens, **options}}))


def runner_of(engine: ASREngine) -> SpeechLLMRunner:
    assert isinstance(engine.runner, SpeechLLMRunner)
    return engine.runner
