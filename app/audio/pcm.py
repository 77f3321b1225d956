"""Headerless PCM (LINEAR16, LINEAR32F, G.711 μ-law / A-law) -> float32 samples."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.audio.encodings import _SAMPLE_WIDTH_BYTES, AudioEncoding, parse_encoding
from app.audio.errors import AudioDecodeError, UnsupportedAudioError
from app.audio.g711 import PCM16_FULL_SCALE, alaw_to_float, mulaw_to_float
from app.audio.limits import _check_channels

__all__ = [
    "alaw_to_float",
    "headerless_to_mono",
    "linear32f_to_float",
    "mulaw_to_float",
    "pcm16_to_float",
]


def pcm16_to_float(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Little-endian int16 PCM -> float32 in [-1, 1). Odd byte counts are an error.

    Stateless on purpose: streaming callers must send whole samples (every realtime
    protocol we serve frames audio in whole samples), so a split sample means a broken client.
    """
    if len(data) % 2:
        raise AudioDecodeError(
            f"16-bit PCM audio must have an even number of bytes, got {len(data)}; send whole 2-byte samples."
        )
    samples: np.ndarray = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(PCM16_FULL_SCALE)
    return samples


def linear32f_to_float(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Little-endian float32 PCM -> float32 (a copy). Byte counts not divisible by 4 are an error."""
    if len(data) % 4:
        raise AudioDecodeError(
            f"32-bit float audio must have a multiple of 4 bytes, got {len(data)}; send whole samples."
        )
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


_HEADERLESS_DECODERS: dict[AudioEncoding, Callable[[bytes | bytearray | memoryview], np.ndarray]] = {
    AudioEncoding.LINEAR16: pcm16_to_float,
    AudioEncoding.LINEAR32F: linear32f_to_float,
    AudioEncoding.MULAW: mulaw_to_float,
    AudioEncoding.ALAW: alaw_to_float,
}
_HEADERLESS_CODEC = {
    AudioEncoding.LINEAR16: "pcm_s16le",
    AudioEncoding.LINEAR32F: "pcm_f32le",
    AudioEncoding.MULAW: "pcm_mulaw",
    AudioEncoding.ALAW: "pcm_alaw",
}


def headerless_to_mono(
    data: bytes | bytearray | memoryview, encoding: AudioEncoding | str, channels: int = 1
) -> np.ndarray:
    """One chunk of a live headerless stream (LINEAR16, LINEAR32F, MULAW, ALAW) -> float32 mono.

    Channels are interleaved and averaged. The chunk must hold whole frames; resample the
    result with `StreamResampler`. Non-finite float samples are an error.
    """
    enc = parse_encoding(encoding)
    if not enc.headerless:
        raise UnsupportedAudioError(
            f"Live audio chunks must be headerless (LINEAR16, LINEAR32F, MULAW or ALAW), not {enc.value}."
        )
    _check_channels(channels)
    frame_bytes = _SAMPLE_WIDTH_BYTES[enc] * channels
    if len(data) % frame_bytes:
        raise AudioDecodeError(
            f"An audio chunk of {len(data)} bytes is not a whole number of {frame_bytes}-byte frames "
            f"({channels} channel(s) of {enc.value}); send whole frames in each chunk."
        )
    samples = _HEADERLESS_DECODERS[enc](data).reshape(-1, channels)
    if enc is AudioEncoding.LINEAR32F and not np.isfinite(samples).all():
        raise AudioDecodeError("The audio contains NaN or infinite sample values. Send finite samples.")
    return _to_mono(samples)


def _to_mono(samples: np.ndarray) -> np.ndarray:
    if samples.shape[1] == 1:
        return np.ascontiguousarray(samples[:, 0], dtype=np.float32)
    mono: np.ndarray = samples.mean(axis=1, dtype=np.float32)
    return mono
