"""Encode a test waveform into any upload format the server accepts (for tests across the repo).

    from tests.audio_variants import VARIANT_FORMATS, encode_variant
    body = encode_variant(samples, 16000, "mp3")              # mono MP3 bytes
    body = encode_variant(stereo, 44100, "ogg_opus", channels=2)

Real encoders only: libsndfile (soundfile) for WAV, FLAC and the headerless formats, FFmpeg
(PyAV) for MP3 (libmp3lame), M4A (AAC) and Opus (libopus) in Ogg or WebM. The signature is
stable: other test suites import it.
"""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np
import soundfile as sf
import soxr

__all__ = ["HEADERLESS_FORMATS", "LOSSY_FORMATS", "OPUS_RATES", "VARIANT_FORMATS", "encode_variant"]

VARIANT_FORMATS = (
    "wav",
    "flac",
    "mp3",
    "m4a",
    "ogg_opus",
    "webm_opus",
    "linear16",
    "linear32f",
    "mulaw",
    "alaw",
)
"""Every `fmt` encode_variant accepts."""
HEADERLESS_FORMATS = frozenset({"linear16", "linear32f", "mulaw", "alaw"})
"""Raw interleaved samples: decode them with an explicit encoding and sample_rate."""
LOSSY_FORMATS = frozenset({"mp3", "m4a", "ogg_opus", "webm_opus", "mulaw", "alaw"})
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
"""Rates libopus accepts; other rates are resampled to 48 kHz before Opus encoding."""

_RAW_SUBTYPE = {"linear16": "PCM_16", "linear32f": "FLOAT", "mulaw": "ULAW", "alaw": "ALAW"}
_FFMPEG = {  # fmt -> (muxer, encoder, bit rate per channel in bit/s)
    "mp3": ("mp3", "libmp3lame", 64_000),
    "m4a": ("ipod", "aac", 64_000),
    "ogg_opus": ("ogg", "libopus", 48_000),
    "webm_opus": ("webm", "libopus", 48_000),
}


def _as_frames(samples: np.ndarray, channels: int) -> np.ndarray:
    """(frames, channels) float32 from 1-D mono (copied to every channel) or 2-D input."""
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim == 1:
        return np.repeat(x[:, None], channels, axis=1)
    if x.ndim != 2 or x.shape[1] != channels:
        raise ValueError(f"samples must be 1-D or (frames, {channels}), got shape {x.shape}")
    return x


def _encode_ffmpeg(frames: np.ndarray, rate: int, fmt: str) -> bytes:
    muxer, encoder, bit_rate = _FFMPEG[fmt]
    if encoder == "libopus" and rate not in OPUS_RATES:
        frames = soxr.resample(frames, rate, 48000).astype(np.float32)
        rate = 48000
    channels = frames.shape[1]
    layout = "mono" if channels == 1 else "stereo" if channels == 2 else f"{channels}c"
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=muxer) as out:
        stream = out.add_stream(encoder, rate=rate, layout=layout)
        stream.bit_rate = bit_rate * channels
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(frames.T), format="fltp", layout=layout)
        frame.sample_rate = rate
        # A real start time lets the encoder mark its priming samples (AAC: an MP4 edit list),
        # as every real-world encoder does; without it decoders would keep the priming.
        frame.pts = 0
        frame.time_base = Fraction(1, rate)
        # PyAV re-frames to the encoder's frame size (1152 for MP3, 1024 for AAC, 20 ms for Opus).
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def encode_variant(samples: np.ndarray, rate: int, fmt: str, channels: int = 1) -> bytes:
    """Encode float samples in [-1, 1] at `rate` Hz into upload bytes of format `fmt`.

    samples: 1-D mono (written to every one of `channels`) or 2-D (frames, channels).
    fmt: one of VARIANT_FORMATS. Containers carry rate and channels in their header; the
    headerless formats (linear16 = int16 LE, linear32f = float32 LE, mulaw, alaw) are
    interleaved samples only, so decode them with that encoding, `rate` and `channels`.
    Opus only runs at OPUS_RATES, so other rates come back as 48 kHz Opus (the header says so).
    """
    frames = _as_frames(samples, channels)
    if fmt in ("wav", "flac"):
        buf = io.BytesIO()
        sf.write(buf, frames, rate, format=fmt.upper(), subtype="PCM_16")
        return buf.getvalue()
    if fmt in _RAW_SUBTYPE:
        buf = io.BytesIO()
        sf.write(buf, frames, rate, format="RAW", subtype=_RAW_SUBTYPE[fmt], endian="LITTLE")
        return buf.getvalue()
    if fmt in _FFMPEG:
        return _encode_ffmpeg(frames, rate, fmt)
    raise ValueError(f"unknown variant format {fmt!r}; use one of {', '.join(VARIANT_FORMATS)}")
