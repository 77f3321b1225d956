"""What `ASREngine` checks before anything is queued: the runner it loads, a request's options
against the model's capabilities, its audio; and the model card `/v1/models` shows.

Kept apart from the step loop so the engine file holds the lifecycle only, and so every check a
surface relies on (through `ASREngine.validate_options` / `validate_audio`) lives in one place.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from engine.capabilities import check_capabilities
from engine.config import EngineConfig
from engine.errors import InvalidRequestError, UnsupportedError
from engine.families import ModelFamily, check_quantization, family_options, load_family, resolve_family
from engine.runner import DurationCheck, ModelInfo, ModelRunner
from engine.types import DecodingOptions, Samples


def _family_of(config: EngineConfig) -> ModelFamily:
    if config.ckpt_dir is None and config.checkpoint_name is None:
        # the embedded model is a Whisper checkpoint: detection would import every family's
        # checkpoint code ahead of it (paraformer, zipformer) for nothing, at each start
        return load_family("whisper")
    return resolve_family(config.resolved_ckpt_dir(), config.checkpoint_name)


def _options_of(family: ModelFamily, config: EngineConfig) -> Any:
    aliased = config.family_knob_aliases().get(family.name)
    return family_options(family, config.family_options, aliased)


def load_runner(config: EngineConfig) -> ModelRunner:
    """The runner of the family whose checkpoint `config` names, loaded with its options."""
    family = _family_of(config)
    check_quantization(family, config)
    return family.build(config, _options_of(family, config))


def describe_model(config: EngineConfig) -> ModelInfo | None:
    """What the model `config` names is and can do, from its checkpoint's configuration alone (no
    weights read): what `load_runner(config).info()` would give, less `parameters` and the details
    only a load knows. None when its family describes nothing before loading. Raises what loading
    would for a checkpoint no family recognises or options the family refuses."""
    family = _family_of(config)
    check_quantization(family, config)
    if family.describe is None:
        return None
    return family.describe(config, _options_of(family, config))


def described_card(info: ModelInfo, *, service_mode: str) -> dict[str, Any]:
    """The /v1/models card of a model not loaded yet: `model_card` of its described info, without
    the kernels (chosen at load) and with `described: true` (its `parameters` are 0, its details
    those its configuration gives)."""
    card = model_card(info, service_mode=service_mode,
                      streaming_enabled=service_mode == "streaming" and info.supports_streaming, kernels={})
    del card["kernels"], card["parameters"]
    card["described"] = True
    return card


def check_decode_method(runner: ModelRunner, info: ModelInfo, method: str | None) -> None:
    """Refuse (and shut the runner down) a configured decode method the model does not offer."""
    if method is not None and method not in info.decode_methods:
        runner.shutdown()
        raise InvalidRequestError(
            f"decode_method {method!r} is not offered by this {info.family} model "
            f"(it offers: {', '.join(info.decode_methods) or 'none'})"
        )


def check_options(runner: ModelRunner, info: ModelInfo, decoding: DecodingOptions | None,
                  streaming: bool) -> DecodingOptions:
    """The options a request is admitted with: ranges (`DecodingOptions.validate`), then the
    model's capabilities (one refusal format), then the family's own value checks."""
    options = decoding or DecodingOptions()
    if not isinstance(options, DecodingOptions):
        raise InvalidRequestError(f"decoding must be DecodingOptions, got {type(options).__name__}")
    options.validate()
    check_capabilities(info.capabilities, family=info.family, model=info.model, languages=info.languages,
                       options=options)
    runner.check_options(options, streaming)
    return options


def check_duration(runner: ModelRunner, seconds: float, options: DecodingOptions) -> None:
    """The family's refusal of options a request of this length cannot be served with, if it has one."""
    if isinstance(runner, DurationCheck):
        runner.check_duration(seconds, options)


def check_streaming(service_mode: str, runner: ModelRunner, family: str) -> None:
    """Refuse a live stream on an engine that serves offline requests only, or on a runner
    without a streaming runtime."""
    if service_mode != "streaming":
        raise InvalidRequestError(
            "this engine serves offline requests only (service_mode='offline'); submit the "
            "whole audio with add_request(audio) or build the engine with service_mode='streaming'"
        )
    if not runner.supports_streaming:
        raise UnsupportedError(f"model family {family!r} has no streaming runtime")


def check_audio(audio: Any, model_rate: int, sample_rate: int | None = None, allow_empty: bool = False) -> Samples:
    """`audio` as a contiguous float32 mono array at `model_rate`, or InvalidRequestError. A torch
    tensor (on any device) and float samples of another precision (float64, float16) are converted,
    as the reference design's `add_request` takes them; integer PCM is refused (its scale is the
    caller's to say)."""
    if sample_rate is not None and sample_rate != model_rate:
        raise InvalidRequestError(
            f"audio must be at {model_rate} Hz (got {sample_rate} Hz); resample before submitting"
        )
    if type(audio).__module__ == "torch" and hasattr(audio, "detach"):  # a tensor, without importing torch here
        import torch

        if not audio.is_floating_point():
            raise InvalidRequestError(f"audio must be float samples in [-1, 1], got a {audio.dtype} tensor")
        audio = audio.detach().to(device="cpu", dtype=torch.float32).numpy()
    if not isinstance(audio, np.ndarray):
        raise InvalidRequestError(f"audio must be a numpy float32 array or a torch tensor, got {type(audio).__name__}")
    if audio.dtype != np.float32 and np.issubdtype(audio.dtype, np.floating):
        audio = audio.astype(np.float32)
    if audio.dtype != np.float32:
        raise InvalidRequestError(f"audio must be float samples in [-1, 1], got dtype {audio.dtype} (divide int16 "
                                  "PCM by 32768)")
    if audio.ndim != 1:
        raise InvalidRequestError(f"audio must be mono (1-D), got shape {audio.shape}")
    if audio.size == 0 and not allow_empty:
        raise InvalidRequestError("audio is empty")
    if audio.size and not np.isfinite(audio).all():
        raise InvalidRequestError("audio contains NaN or infinite samples")
    return np.ascontiguousarray(audio)


def model_card(info: ModelInfo, *, service_mode: str, streaming_enabled: bool,
               kernels: dict[str, Any]) -> dict[str, Any]:
    """The JSON card of a loaded model: its facts (`details` merged in), its capabilities, and how
    the engine serves it. Holds no file-system path."""
    card: dict[str, Any] = {
        f.name: list(v) if isinstance(v := getattr(info, f.name), tuple) else v
        for f in dataclasses.fields(info) if f.name not in ("details", "capabilities")
    }
    card["capabilities"] = dataclasses.asdict(info.capabilities)
    # the flat names /v1/models has always shown
    card.update(can_align_words=info.capabilities.word_timestamps, can_translate=info.capabilities.translate)
    card.update(info.details)
    card.update(streaming=info.supports_streaming, service_mode=service_mode, streaming_enabled=streaming_enabled,
                kernels=kernels)
    return card


__all__ = ["check_audio", "check_decode_method", "check_duration", "check_options", "check_streaming", "describe_model",
           "described_card", "load_runner", "model_card"]
