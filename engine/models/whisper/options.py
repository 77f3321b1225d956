"""Whisper family options (`EngineConfig.family_options["whisper"]`, server settings `OASR_WHISPER_*`).

The live-streaming cadence (`stream_step_ms`, `stream_window_s`, `stream_encoder_context`) and
the decode-row budget (`max_decode_rows`) stay on `EngineConfig`: they are how the engine
schedules any re-decoding stream, not facts of this checkpoint format.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WhisperOptions:
    """No Whisper-only knobs yet: every Whisper setting is an engine setting."""
