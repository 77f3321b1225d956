"""Whisper's own engine options (the family's knobs beside the engine-wide EngineConfig)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.config import EngineConfig
from engine.errors import InvalidRequestError

EncoderContext = Literal["fit", "full"]


@dataclass(frozen=True)
class WhisperOptions:
    offline_encoder_context: EncoderContext = "fit"
    """Offline windows shorter than 30 s: 'fit' encodes the audio plus 1 s of padding and
    completes Whisper's 30 s context with the encoding of silence (context.py); 'full' encodes
    the zero-padded 30 s window, as openai/whisper and faster-whisper do. The window's positions
    also attend to the silence's own (per encoder layer), as they would in a 30 s window. On the
    dev set (25 clips, mostly under 10 s) 'fit' encodes ~4x fewer frames and the transcripts'
    corpus WER is the same as 'full' (12.44 %, docs/benchmarking.md). Requests with word
    timestamps keep 'full': word timing reads the cross-attention learnt on 30 s encodings."""

    def __post_init__(self) -> None:
        if self.offline_encoder_context not in ("fit", "full"):
            raise InvalidRequestError(
                f"offline_encoder_context must be 'fit' or 'full', got {self.offline_encoder_context!r}")

    @classmethod
    def from_config(cls, config: EngineConfig) -> WhisperOptions:
        """The options in `config.extra['whisper']` (a WhisperOptions), or the defaults."""
        found = config.extra.get("whisper")
        if found is None:
            return cls()
        if not isinstance(found, WhisperOptions):
            raise InvalidRequestError(f"extra['whisper'] must be a WhisperOptions, got {type(found).__name__}")
        return found
