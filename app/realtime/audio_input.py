"""Audio payloads of a realtime session -> float32 mono samples at the client's rate, and the
pipeline that brings them to the model: resampling, then the session's noise reduction.

A session takes headerless samples only. A payload that starts with a container header
(a WAV, FLAC, Ogg, MP3-with-ID3 file...) is a file sent by mistake; decoding it as samples
would transcribe noise, so it is refused with an error naming the file endpoint instead.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np

from app.audio import (
    AudioError,
    StreamResampler,
    alaw_to_float,
    mulaw_to_float,
    pcm16_to_float,
    sniff_container,
)
from app.audio.denoise import NoiseReducer, NoiseReductionUnavailable
from app.realtime.config import InputFormat, NoiseReduction
from app.realtime.events import ProtocolError

# Containers with unmistakable magic bytes. MP3/AAC frame syncs are left out: raw PCM can
# start with the same two bytes by chance; an MP3 file starting with an ID3 tag is caught.
_FILE_MAGIC = frozenset({"wav", "flac", "ogg", "webm", "mp4", "aiff", "caf", "amr"})
_SNIFF_BYTES = 4096


def decode_base64(value: object) -> bytes:
    """The `audio` field of `input_audio_buffer.append`."""
    if not isinstance(value, str):
        raise ProtocolError("input_audio_buffer.append needs 'audio': base64-encoded audio bytes",
                            code="invalid_value", param="audio")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(f"'audio' is not valid base64: {exc}", code="invalid_value", param="audio") from exc


def container_of(data: bytes) -> str | None:
    """Name of the file format `data` starts with, or None for headerless audio."""
    head = data[:_SNIFF_BYTES]
    name = sniff_container(head)
    if name in _FILE_MAGIC:
        return name
    if head[:3] == b"ID3":
        return "mp3 (ID3 tag)"
    return None


def decode_chunk(data: bytes, fmt: InputFormat) -> np.ndarray:
    """One payload -> float32 mono samples at `fmt.rate`."""
    container = container_of(data)
    if container is not None:
        raise ProtocolError(
            f"the audio is a {container} file, but a realtime session takes headerless {fmt.describe()} samples. "
            "Send raw samples (no file header), or POST whole files to /v1/audio/transcriptions.",
            code="invalid_audio_format", param="audio")
    try:
        if fmt.encoding == "pcm16":
            return pcm16_to_float(data)
        if fmt.encoding == "pcmu":
            return mulaw_to_float(data)
        return alaw_to_float(data)
    except AudioError as exc:
        raise ProtocolError(str(exc), code="invalid_audio", param="audio") from exc


class InputPipeline:
    """Client-rate samples -> model-rate samples: resampled, then denoised when the session asks.
    Output lags input (the resampler's and the denoiser's look-ahead) but is never shortened:
    `flush` at the end of a turn hands on the rest, and the pipeline goes on for the next one."""

    def __init__(self, fmt: InputFormat, model_rate: int, noise: NoiseReduction | None) -> None:
        self.fmt = fmt
        self.model_rate = model_rate
        self._resampler = StreamResampler(fmt.rate, model_rate)
        self._denoiser = make_denoiser(noise, model_rate)

    def process(self, samples: np.ndarray) -> np.ndarray:
        out = self._resampler.process(samples)
        return self._denoiser.process(out) if self._denoiser is not None else out

    def flush(self) -> np.ndarray:
        tail = self._resampler.flush()
        self._resampler = StreamResampler(self.fmt.rate, self.model_rate)
        if self._denoiser is None:
            return tail
        return np.concatenate([self._denoiser.process(tail), self._denoiser.flush()])


def make_denoiser(noise: NoiseReduction | None, rate: int) -> NoiseReducer | None:
    """The session's noise reducer, or a ProtocolError when the server cannot reduce noise."""
    if noise is None:
        return None
    try:
        return NoiseReducer(noise.type, noise.strength, rate)
    except NoiseReductionUnavailable as exc:
        raise ProtocolError(f"noise_reduction is not available on this server ({exc}); set it to null",
                            code="noise_reduction_unavailable", param="session.audio.input.noise_reduction") from exc
