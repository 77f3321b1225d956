"""Audio decoding at the edge of the server: uploaded bytes -> float32 mono at the model rate.

The engine only ever sees waveforms. Every surface (OpenAI upload, Google gRPC, realtime
WebSocket) turns what the client sent into float32 mono samples at `target_rate` here:

    bytes --sniff--> container (soundfile for WAV/FLAC/Ogg-Vorbis, PyAV/FFmpeg for the rest)
          or headerless PCM (LINEAR16, LINEAR32F, G.711 μ-law / A-law)
          --> (frames, channels) float32 --mean--> mono --soxr--> target_rate

Exceptions (every one carries the HTTP `status_code` a route should answer with):

    AudioError                    base, status_code
    ├── AudioDecodeError          400: empty, garbage, truncated/corrupt, bad sample_rate/channels, NaN
    ├── UnsupportedAudioError     400: unknown encoding or codec, sample rate outside what we resample
    └── AudioTooLongError         413: decoded duration is above max_seconds

Messages are written for the person who sent the audio: what is wrong and what to do.
This module has no web-framework imports; routes map `status_code` themselves.

Modules, by responsibility: `errors` (the hierarchy above), `limits` (rate/channel bounds),
`encodings` (names and magic-byte sniffing), `pcm` (headerless samples), `decode`
(`decode_audio`), `pool` (`AudioDecoder`), `stream` (`StreamResampler`, `HeaderlessStream`,
`ChannelSplitter`),
`container_stream` (`ContainerStream`: WebM/Ogg and other containers arriving live).
"""

from __future__ import annotations

from app.audio.decode import DecodedAudio, decode_audio
from app.audio.encodings import AudioEncoding, parse_encoding, sniff_container
from app.audio.errors import AudioDecodeError, AudioError, AudioTooLongError, UnsupportedAudioError
from app.audio.limits import (
    MAX_CHANNELS,
    MAX_SAMPLE_RATE_HZ,
    MIN_SAMPLE_RATE_HZ,
    MODEL_SAMPLE_RATE_HZ,
    RESAMPLE_QUALITY,
)
from app.audio.pcm import (
    alaw_to_float,
    headerless_to_mono,
    linear32f_to_float,
    mulaw_to_float,
    pcm16_to_float,
)
from app.audio.pool import DEFAULT_MAX_CONCURRENT_DECODES, AudioDecoder
from app.audio.stream import ChannelSplitter, HeaderlessStream, StreamResampler

__all__ = [
    "DEFAULT_MAX_CONCURRENT_DECODES",
    "MAX_CHANNELS",
    "MAX_SAMPLE_RATE_HZ",
    "MIN_SAMPLE_RATE_HZ",
    "MODEL_SAMPLE_RATE_HZ",
    "RESAMPLE_QUALITY",
    "AudioDecodeError",
    "AudioDecoder",
    "AudioEncoding",
    "AudioError",
    "AudioTooLongError",
    "ChannelSplitter",
    "DecodedAudio",
    "HeaderlessStream",
    "StreamResampler",
    "UnsupportedAudioError",
    "alaw_to_float",
    "decode_audio",
    "headerless_to_mono",
    "linear32f_to_float",
    "mulaw_to_float",
    "parse_encoding",
    "pcm16_to_float",
    "sniff_container",
]
