"""Whisper's own counts over the runner's life, reported in its stats (`RunnerStats`): the live
passes it ran and the audio they encoded, and the speech its coverage check decoded again or left
without words. The server replays them as its re-decoding series (oasr_engine_stream_passes_total,
oasr_engine_speech_recovered_seconds_total, ...)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WhisperTotals:
    """One runner's totals; only grow. Written on the engine thread, which also reads the stats."""

    passes: int = 0
    """Passes started over live streams' windows (finals included, and interim passes a final
    supersedes before they run)."""
    encoded_s: float = 0.0
    """Audio those passes encoded, padding included (s)."""
    speech_recovered_s: float = 0.0
    """Speech (s) the VAD heard that no decoded word covered, decoded once more (coverage.py)."""
    speech_uncovered_s: float = 0.0
    """Speech (s) still without words after that extra decode."""

    def count_pass(self, encoded_s: float) -> None:
        self.passes += 1
        self.encoded_s += encoded_s
