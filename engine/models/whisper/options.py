"""Whisper family options (`EngineConfig.family_options["whisper"]`, server settings `OASR_WHISPER_*`).

The live-streaming knobs (`stream_step_ms`, `stream_window_s`, `stream_encoder_context`) were
`EngineConfig` fields: only this family re-decodes a sliding window. The old names stay one release
as deprecated aliases (engine.config.DEPRECATED_FAMILY_KNOBS). The decode-row budget
(`max_decode_rows`) stays on `EngineConfig`: the speechllm family reads it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.errors import InvalidRequestError

EncoderContext = Literal["fit", "full"]
LongForm = Literal["parallel", "sequential"]
MIN_STREAM_STEP_MS = 20
"""Finest live pass cadence accepted, in ms: every pass re-decodes the stream's whole window, so the
work per stream grows as the cadence shrinks."""


@dataclass(frozen=True)
class WhisperOptions:
    offline_encoder_context: EncoderContext = "fit"
    """Offline windows shorter than 30 s: 'fit' encodes the audio plus 1 s of padding and
    completes Whisper's 30 s context with the encoding of silence, which the window's positions
    also attend to in every encoder layer, as they would in a 30 s window (context.py); 'full'
    encodes the 30 s window padded as openai/whisper and Transformers pad it (their transcripts).
    'fit' encodes several times fewer frames for short clips at the same corpus WER, but is an
    approximation of the reference (drift measured in docs/benchmarking.md). Requests with word
    timestamps keep 'full': word timing reads the cross-attention learnt on 30 s encodings."""

    offline_long_form: LongForm = "parallel"
    """Offline requests longer than one 30 s window: 'parallel' cuts their speech at Silero VAD
    silences into windows of at most 30 s (the silence between them left out) and decodes the
    windows side by side as rows of the batch, each without the previous window's text
    (engine/models/whisper/longform.py; docs/benchmarking.md, long-form); 'sequential' decodes
    30 s windows one after another, each conditioned on the text before it (openai/whisper's
    `transcribe`). Without the VAD (the silero-vad package missing) requests are sequential."""

    skip_silent_passes: bool = True
    """Live streams: skip a pass while the Silero VAD hears no speech after what the last pass
    heard (the last speech, then 1 s of silence) and every word heard is committed: such a pass
    writes nothing (what it saves: docs/benchmarking.md, streaming capacity). Audio without
    speech still gets a pass every 3 s, for speech the VAD misses. False: a pass every
    cadence period. Without the VAD (the silero-vad package missing) every pass runs."""

    speech_coverage: bool = True
    """Offline and live: speech the Silero VAD hears that no decoded word covers (Whisper ended a
    window early, or judged it silent) is decoded once more, from where the words end
    (engine/models/whisper/coverage.py); counted by oasr_engine_speech_recovered_seconds_total and
    oasr_engine_speech_uncovered_seconds_total. False: windows advance as Whisper decoded them (as
    openai/whisper and faster-whisper do), and such speech can be lost."""

    stream_step_ms: int = 500
    """Live streams: a stream is re-decoded once this many ms of new audio have arrived (the
    partial cadence; a request's `delay` passes at a multiple of it). Lower gives faster partials
    and costs proportionally more compute per stream."""

    stream_window_s: float = 30.0
    """Live streams: longest uncommitted audio window re-decoded per pass, in seconds (Whisper's
    context is 30 s)."""

    stream_encoder_context: EncoderContext = "fit"
    """Live streams: 'fit' encodes a pass's window plus 1 s of silence and fills the rest of
    Whisper's 30 s context with the encoding of silence (several times cheaper for short
    windows); 'full' encodes the whole zero-padded 30 s window, as offline requests are."""

    def __post_init__(self) -> None:
        for name in ("offline_encoder_context", "stream_encoder_context"):
            if getattr(self, name) not in ("fit", "full"):
                raise InvalidRequestError(f"{name} must be 'fit' or 'full', got {getattr(self, name)!r}")
        if self.offline_long_form not in ("parallel", "sequential"):
            raise InvalidRequestError(f"offline_long_form must be 'parallel' or 'sequential', got {self.offline_long_form!r}")
        if self.stream_step_ms < MIN_STREAM_STEP_MS:
            raise InvalidRequestError(f"stream_step_ms must be >= {MIN_STREAM_STEP_MS}, got {self.stream_step_ms}")
        if not self.stream_window_s > 0:
            raise InvalidRequestError(f"stream_window_s must be > 0, got {self.stream_window_s}")
