"""Sample-rate and channel limits shared by the whole-body decoder and the live-stream paths."""

from __future__ import annotations

from app.audio.errors import AudioDecodeError, UnsupportedAudioError

__all__ = [
    "MAX_CHANNELS",
    "MAX_SAMPLE_RATE_HZ",
    "MIN_SAMPLE_RATE_HZ",
    "MODEL_SAMPLE_RATE_HZ",
    "RESAMPLE_QUALITY",
]

MODEL_SAMPLE_RATE_HZ = 16000
"""Whisper's input rate; the default `target_rate`."""
MIN_SAMPLE_RATE_HZ = 4000
"""Lowest source rate accepted (Hz); below it there is no usable speech band left."""
MAX_SAMPLE_RATE_HZ = 384000
"""Highest source rate accepted (Hz); the top rate of studio converters."""
MAX_CHANNELS = 32
"""Most interleaved channels accepted for headerless audio; larger counts are a client mistake."""
RESAMPLE_QUALITY = "HQ"
"""soxr quality recipe: 'HQ' keeps the passband flat up to ~95 % of Nyquist at a low CPU cost."""


def _check_channels(channels: int) -> None:
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= MAX_CHANNELS:
        raise AudioDecodeError(f"channels must be an integer from 1 to {MAX_CHANNELS}, got {channels!r}.")


def _check_rate(rate: int, what: str) -> None:
    if not MIN_SAMPLE_RATE_HZ <= rate <= MAX_SAMPLE_RATE_HZ:
        raise UnsupportedAudioError(
            f"{what} of {rate} Hz is not supported; audio must be sampled between "
            f"{MIN_SAMPLE_RATE_HZ} and {MAX_SAMPLE_RATE_HZ} Hz."
        )
