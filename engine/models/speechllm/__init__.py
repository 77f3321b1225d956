"""Speech-LLMs: an audio encoder, a projector and a Qwen LLM decoder (Qwen2-Audio).

Checkpoint directories as Transformers saves them (config.json with a speech-LLM `model_type`,
*.safetensors, tokenizer.json, generation_config.json). Offline only: a request's whole audio
is encoded (audio over one 30 s window: cut at silences, each segment decoded as its own rows,
the texts stitched in order), then its transcript is generated token by token, every running request's decode
step batched with the others', their K/V in the engine's paged block pool. Options:
`SpeechLLMOptions`. Importing this package loads no torch code.
"""

from __future__ import annotations

from engine.config import EngineConfig
from engine.families import ModelFamily
from engine.models.speechllm.options import SpeechLLMOptions
from engine.runner import ModelInfo, ModelRunner


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    from engine.models.speechllm.info import detect as detect_checkpoint

    return detect_checkpoint(ckpt_dir, checkpoint_name)


def build(config: EngineConfig, options: SpeechLLMOptions) -> ModelRunner:
    from engine.models.speechllm.runner import SpeechLLMRunner

    return SpeechLLMRunner.from_config(config, options)


def describe(config: EngineConfig, options: SpeechLLMOptions) -> ModelInfo:
    from engine.models.speechllm.info import describe as describe_config

    return describe_config(config, options)


FAMILY = ModelFamily(name="speechllm", detect=detect, build=build, options=SpeechLLMOptions, describe=describe,
                     not_converted="Transformers' safetensors layout is already memory-mapped as it is served",
                     not_quantized="its runner computes in float only (no int8 layers to write ahead of time)",
                     # Transformers' one-file or sharded weights (not "*.safetensors": a Whisper repo's fp32 shards would match)
                     hub_files=("config.json", "generation_config.json", "tokenizer.json", "model.safetensors",
                                "model-*-of-*.safetensors"))

__all__ = ["FAMILY", "SpeechLLMOptions", "build", "describe", "detect"]
