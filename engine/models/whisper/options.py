"""Whisper family options (`EngineConfig.family_options["whisper"]`, server settings `OASR_WHISPER_*`).

The live-streaming cadence (`stream_step_ms`, `stream_window_s`, `stream_encoder_context`) and
the decode-row budget (`max_decode_rows`) stay on `EngineConfig`: they are how the engine
schedules any re-decoding stream, not facts of this checkpoint format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.errors import InvalidRequestError

EncoderContext = Literal["fit", "full"]


@dataclass(frozen=True)
class WhisperOptions:
    offline_encoder_context: EncoderContext = "fit"
    """Offline windows shorter than 30 s: 'fit' encodes the audio plus 1 s of padding and
    completes Whisper's 30 s context with the encoding of silence, which the window's positions
    also attend to in every encoder layer, as they would in a 30 s window (context.py); 'full'
    encodes the 30 s window padded as openai/whisper and Transformers pad it (their transcripts,
    to 0.61 % drift WER on the dev set at float32). On the dev set (25 clips, mostly under 10 s)
    'fit' encodes ~4x fewer frames with the same corpus WER (12.44 %, docs/benchmarking.md) but
    is an approximation: 3 % drift WER from the reference. Requests with word timestamps keep
    'full': word timing reads the cross-attention learnt on 30 s encodings."""

    int8_decoder: bool = True
    """When the weights are int8 (quantization int8_w8a8, or 'auto' on a CPU with VNNI): False
    quantizes only the audio encoder and keeps the text decoder, its output projection included,
    in float32. Measured on the dev set (docs/benchmarking.md): beam 5 then writes what
    faster-whisper int8 beam 5 writes (9.45 % WER; 10.95 % with the int8 decoder, where int8 on
    both halves moves one clip's beam) for ~1.35x the time of the all-int8 engine; greedy WER is
    12.44 % against 11.94 %. The default keeps the faster all-int8 decoder."""

    def __post_init__(self) -> None:
        if not isinstance(self.int8_decoder, bool):
            raise InvalidRequestError(f"int8_decoder must be true or false, got {self.int8_decoder!r}")
        if self.offline_encoder_context not in ("fit", "full"):
            raise InvalidRequestError(
                f"offline_encoder_context must be 'fit' or 'full', got {self.offline_encoder_context!r}")
