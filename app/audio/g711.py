"""G.711 (μ-law / A-law) decoding through 256-entry lookup tables.

Telephony audio (Twilio media streams, SIP gateways) arrives as 8-bit G.711 codes.
Python 3.13 removed `audioop`, so the ITU-T G.711 expansion is built once here as two
numpy tables of linear 16-bit values; decoding a buffer is one table lookup.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ALAW_TO_INT16", "MULAW_TO_INT16", "alaw_to_float", "mulaw_to_float"]

PCM16_FULL_SCALE = 32768.0
"""Divisor that maps int16 to float in [-1, 1): the convention of soundfile and FFmpeg."""

_MULAW_BIAS = 0x84
"""μ-law encoders add 132 before the logarithmic segment search; the decoder removes it."""


def _mulaw_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int32)
    u = ~codes & 0xFF  # μ-law codes are transmitted bit-inverted
    exponent = (u >> 4) & 0x07
    mantissa = u & 0x0F
    magnitude = (((mantissa << 3) + _MULAW_BIAS) << exponent) - _MULAW_BIAS
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int32)
    a = codes ^ 0x55  # A-law toggles the even bits on the wire
    exponent = (a >> 4) & 0x07
    mantissa = a & 0x0F
    # Segment 0 is linear; higher segments carry an implicit leading one (0x100 after the shift).
    linear = (mantissa << 4) + 8
    magnitude = np.where(exponent == 0, linear, (linear + 0x100) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


MULAW_TO_INT16: np.ndarray = _mulaw_table()
"""μ-law code (0..255) -> linear int16 sample, per ITU-T G.711."""
ALAW_TO_INT16: np.ndarray = _alaw_table()
"""A-law code (0..255) -> linear int16 sample, per ITU-T G.711."""

_MULAW_TO_FLOAT = (MULAW_TO_INT16 / PCM16_FULL_SCALE).astype(np.float32)
_ALAW_TO_FLOAT = (ALAW_TO_INT16 / PCM16_FULL_SCALE).astype(np.float32)


def mulaw_to_float(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Decode μ-law bytes (one sample per byte) to float32 in [-1, 1)."""
    return _MULAW_TO_FLOAT[np.frombuffer(data, dtype=np.uint8)]


def alaw_to_float(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Decode A-law bytes (one sample per byte) to float32 in [-1, 1)."""
    return _ALAW_TO_FLOAT[np.frombuffer(data, dtype=np.uint8)]
