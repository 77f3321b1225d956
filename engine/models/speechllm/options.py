"""Speech-LLM family options (`EngineConfig.family_options["speechllm"]`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeechLLMOptions:
    max_new_tokens: int = 256
    """Tokens generated per request unless it asks for fewer (`DecodingOptions.max_new_tokens`).
    30 s of speech is ~100 tokens of text (~3.5 tokens/s); 256 leaves room for fast talkers."""

    max_beam_size: int = 8
    """Largest `beam_size` served (each beam is one decoder row)."""

    length_penalty: float = 1.0
    """Beam search: a finished hypothesis scores sum(logprobs) / length ** length_penalty
    (Transformers' `generate` default)."""

    block_size: int = 16
    """Token positions per KV block (EngineConfig.block_size_frames overrides it)."""

    long_form_rows: int = 8
    """Audio over one 30 s window is cut at silences into segments; this many segments of one
    request decode at once (each a row of the batch, beside other requests')."""

    long_form_vad: str = "silero"
    """The VAD that finds the silences to cut at ('silero' or 'energy')."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_beam_size < 1:
            raise ValueError(f"max_beam_size must be >= 1, got {self.max_beam_size}")
        if self.long_form_rows < 1:
            raise ValueError(f"long_form_rows must be >= 1, got {self.long_form_rows}")
        if self.long_form_vad not in ("silero", "energy"):
            raise ValueError(f"long_form_vad must be 'silero' or 'energy', got {self.long_form_vad!r}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
