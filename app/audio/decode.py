"""Whole-body decode: uploaded bytes -> `DecodedAudio` (float32 mono at the target rate).

Containers go through soundfile (WAV/FLAC/Ogg-Vorbis) or PyAV/FFmpeg (the rest), headerless
PCM through `app.audio.pcm`; a header's declared length is checked against what decoded.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import av
import numpy as np
import soundfile as sf
import soxr

from app.audio.downmix import MonoAtRate
from app.audio.encodings import (
    _SAMPLE_WIDTH_BYTES,
    AudioEncoding,
    _id3v2_end,
    parse_encoding,
    sniff_container,
)
from app.audio.errors import AudioDecodeError, AudioTooLongError, UnsupportedAudioError
from app.audio.limits import (
    MAX_SAMPLE_RATE_HZ,
    MIN_SAMPLE_RATE_HZ,
    MODEL_SAMPLE_RATE_HZ,
    RESAMPLE_QUALITY,
    _check_channels,
    _check_rate,
)
from app.audio.pcm import _HEADERLESS_CODEC, _HEADERLESS_DECODERS

__all__ = ["DecodedAudio", "decode_audio"]

logger = logging.getLogger(__name__)

TRUNCATION_TOLERANCE_S = 0.25
"""Decoded audio may fall short of a header's declared length by this many seconds
(plus TRUNCATION_TOLERANCE_FRACTION) before the file is called truncated: codec
priming, padding and rounding in muxers stay well inside it."""
TRUNCATION_TOLERANCE_FRACTION = 0.02

FFMPEG_DEMUXERS = (
    "wav,w64,flac,ogg,mp3,mov,matroska,aac,amr,amrnb,amrwb,aiff,caf,au,wv,ape,tta,mpc,mpc8,"
    "asf,avi,flv,mpeg,mpegts,ac3,eac3,dts,loas,gsm,voc,dsf,xwma,sbc,nut,ircam"
)
"""The FFmpeg demuxers an upload may open. An allow-list, because FFmpeg also probes
playlists (hls, concat) that open further files or URLs, and image formats we never want."""


@dataclass(frozen=True)
class DecodedAudio:
    """Decoded audio ready for the engine."""

    samples: np.ndarray
    """float32 mono at `sample_rate`, shape (n,). Not clipped: float sources may exceed [-1, 1]."""
    sample_rate: int
    """The target rate the samples are at (16000 for Whisper)."""
    source_rate: int
    """The rate the upload was encoded at."""
    source_channels: int
    """Channels in the upload before the downmix to mono."""
    duration: float
    """Seconds of audio (len(samples) / sample_rate)."""
    container: str
    """'raw' for headerless PCM, else the detected container (wav, flac, ogg, mp3, mp4, webm, ...)."""
    codec: str
    """Codec inside the container (pcm_s16le, flac, mp3, aac, opus, vorbis, pcm_mulaw, ...)."""
    channels: tuple[np.ndarray, ...] = ()
    """With `keep_channels=True`: each source channel alone, float32 at `sample_rate`; else empty."""


@dataclass
class _Decoded:
    """What a decoder took (downmixed and resampled as it went, app/audio/downmix.py)."""

    audio: MonoAtRate
    container: str
    codec: str


# Containers whose magic is unmistakable: when a client declares a headerless encoding but
# sends one of these, it sent a file, and decoding it as raw samples would produce noise.
_STRONG_MAGIC = frozenset({"wav", "flac", "ogg", "webm", "mp4", "aiff", "caf", "amr"})

# FFmpeg demuxer to force when the declared encoding is a container and sniffing failed.
_DECLARED_FFMPEG_FORMAT = {
    AudioEncoding.WAV: "wav",
    AudioEncoding.FLAC: "flac",
    AudioEncoding.MP3: "mp3",
    AudioEncoding.OGG_OPUS: "ogg",
    AudioEncoding.WEBM_OPUS: "matroska",
}

_SUPPORTED_FORMATS_HINT = (
    "Send WAV, FLAC, MP3, M4A/AAC, Ogg (Opus or Vorbis) or WebM/Opus, or raw samples with an "
    "explicit encoding (LINEAR16, LINEAR32F, MULAW, ALAW) and sample_rate."
)


def _too_long(seconds: float, max_seconds: float, *, at_least: bool = False) -> AudioTooLongError:
    qualifier = "at least " if at_least else ""
    return AudioTooLongError(
        f"The audio is {qualifier}{seconds:.1f} s long, above the {max_seconds:g} s limit of this "
        "endpoint. Send a shorter clip or split it, or use the streaming API for long audio."
    )


def _truncated(declared_s: float, decoded_s: float) -> AudioDecodeError:
    return AudioDecodeError(
        f"The audio file is truncated or corrupt: its header declares {declared_s:.2f} s but only "
        f"{decoded_s:.2f} s could be decoded. Upload the complete file."
    )


def _is_short_of(declared_s: float, decoded_s: float) -> bool:
    return decoded_s < declared_s * (1 - TRUNCATION_TOLERANCE_FRACTION) - TRUNCATION_TOLERANCE_S


def _decode_headerless(
    data: bytes, encoding: AudioEncoding, sample_rate: int | None, channels: int, max_seconds: float | None,
    audio: MonoAtRate,
) -> _Decoded:
    name = encoding.value
    if not sample_rate:  # None, or 0 as proto3 sends "unset"
        raise AudioDecodeError(
            f"{name} audio has no header, so the sample rate must be given (for example "
            "sample_rate=16000), or send a file format such as WAV or FLAC instead."
        )
    _check_channels(channels)
    _check_rate(sample_rate, "A sample rate")
    frame_bytes = _SAMPLE_WIDTH_BYTES[encoding] * channels
    if len(data) % frame_bytes:
        raise AudioDecodeError(
            f"The {name} body is {len(data)} bytes, not a whole number of {frame_bytes}-byte frames "
            f"({channels} channel(s) × {_SAMPLE_WIDTH_BYTES[encoding]} byte(s)); check the encoding "
            "and channel count, or that the upload was not cut short."
        )
    seconds = len(data) / frame_bytes / sample_rate
    if max_seconds is not None and seconds > max_seconds:
        raise _too_long(seconds, max_seconds)
    flat = _HEADERLESS_DECODERS[encoding](data)
    audio.add(flat.reshape(-1, channels), sample_rate)
    return _Decoded(audio, "raw", _HEADERLESS_CODEC[encoding])


# --------------------------------------------------------------------------- container decoders


def _wav_declared_data_bytes(data: bytes) -> int | None:
    """Size of the 'data' chunk a RIFF/WAVE header declares, or None when unknown.

    libsndfile and FFmpeg both silently clamp a short data chunk to what is present, so a cut
    upload would pass as a shorter clip; walking the chunk list ourselves is the only way to see it.
    """
    if data[:4] != b"RIFF":  # RF64 keeps the real size in 'ds64'; streamed headers are left alone
        return None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        size = int.from_bytes(data[pos + 4 : pos + 8], "little")
        if chunk_id == b"data":
            # 0 and 0xFFFFFFFF are what streaming writers put before they know the length.
            return None if size in (0, 0xFFFFFFFF) else size
        pos += 8 + size + (size & 1)  # chunks are word-aligned
    return None


def _check_wav_complete(data: bytes) -> None:
    declared = _wav_declared_data_bytes(data)
    if declared is None:
        return
    pos = data.find(b"data", 12)
    present = len(data) - (pos + 8)
    if present < declared:
        raise AudioDecodeError(
            f"The WAV file is truncated: its header declares {declared} bytes of audio but only "
            f"{max(present, 0)} are present. Upload the complete file."
        )


_SF_COUNT_MAX = 2**63 - 1
_SOUNDFILE_BLOCK_S = 10
"""Seconds read per libsndfile block, so a length cap stops a long file early."""
# libsndfile subtypes under the FFmpeg codec names the rest of this module reports.
_SOUNDFILE_CODEC = {
    "PCM_U8": "pcm_u8",
    "PCM_S8": "pcm_s8",
    "PCM_16": "pcm_s16le",
    "PCM_24": "pcm_s24le",
    "PCM_32": "pcm_s32le",
    "FLOAT": "pcm_f32le",
    "DOUBLE": "pcm_f64le",
    "ULAW": "pcm_mulaw",
    "ALAW": "pcm_alaw",
}
# FFmpeg decoder names that differ from the codec's own name.
_FFMPEG_CODEC = {"mp3float": "mp3", "mp2float": "mp2", "aac_fixed": "aac", "libopus": "opus"}


def _decode_with_soundfile(data: bytes, container: str, max_seconds: float | None, audio: MonoAtRate) -> _Decoded:
    """WAV, FLAC and Ogg/Vorbis through libsndfile (exact lengths from the header, no FFmpeg)."""
    with sf.SoundFile(io.BytesIO(data)) as f:
        rate, frames = f.samplerate, f.frames
        _check_rate(rate, "The file's sample rate")
        # libsndfile reports SF_COUNT_MAX when the header leaves the length open (streamed FLAC).
        known = frames < _SF_COUNT_MAX
        if known and max_seconds is not None and frames / rate > max_seconds:
            raise _too_long(frames / rate, max_seconds)
        codec = "flac" if container == "flac" else _SOUNDFILE_CODEC.get(f.subtype, f.subtype.lower())
        for block in f.blocks(blocksize=_SOUNDFILE_BLOCK_S * rate, dtype="float32", always_2d=True):
            audio.add(block, rate)
            if max_seconds is not None and audio.frames / rate > max_seconds:
                raise _too_long(audio.frames / rate, max_seconds, at_least=True)
    total = audio.frames
    if container == "flac" and known and frames > 0 and _is_short_of(frames / rate, total / rate):
        raise _truncated(frames / rate, total / rate)
    return _Decoded(audio, container, codec)


def _mp3_has_length_tag(data: bytes) -> bool:
    """True when an MP3 carries a Xing/Info/VBRI frame, i.e. its header states the exact length.

    Without one FFmpeg estimates the duration from the first frame's bitrate, which can be far
    off for VBR files, so only tagged files are checked for truncation.
    """
    start = _id3v2_end(data)
    window = data[start : start + 4096]
    return any(tag in window for tag in (b"Xing", b"Info", b"VBRI"))


def _declared_seconds(
    container: av.container.InputContainer, stream: av.AudioStream, data: bytes
) -> float | None:
    """Length the container header states exactly, or None where FFmpeg would only estimate it."""
    fmt = container.format.name
    exact = (
        "mp4" in fmt.split(",")
        or "matroska" in fmt.split(",")
        or fmt == "flac"
        or (fmt == "mp3" and _mp3_has_length_tag(data))
    )
    if not exact:
        return None
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / av.time_base
    return None


def _container_name(fmt_name: str, sniffed: str | None) -> str:
    names = fmt_name.split(",")
    if sniffed is not None:
        return sniffed
    if "mp4" in names:
        return "mp4"
    if "matroska" in names:
        return "webm"
    return names[0]


def _decode_with_ffmpeg(
    data: bytes, sniffed: str | None, forced_format: str | None, max_seconds: float | None, audio: MonoAtRate
) -> _Decoded:
    """Anything FFmpeg demuxes (MP3, M4A/AAC, Ogg/Opus, WebM, ...) through PyAV."""
    try:
        container = av.open(
            io.BytesIO(data), mode="r", format=forced_format, options={"format_whitelist": FFMPEG_DEMUXERS}
        )
    except (av.FFmpegError, EOFError) as exc:
        logger.debug("FFmpeg could not open the upload (format=%s): %s", forced_format, exc)
        raise AudioDecodeError(
            "The audio could not be read: the format was not recognised or the file is corrupt. "
            + _SUPPORTED_FORMATS_HINT
        ) from exc
    with container:
        if not container.streams.audio:
            raise AudioDecodeError("The file contains no audio track. " + _SUPPORTED_FORMATS_HINT)
        stream = container.streams.audio[0]
        if stream.codec_context is None:
            raise UnsupportedAudioError(
                f"The audio codec of this {container.format.name} file is not supported. "
                + _SUPPORTED_FORMATS_HINT
            )
        codec = _FFMPEG_CODEC.get(stream.codec_context.name, stream.codec_context.name)
        declared = _declared_seconds(container, stream, data)
        if (
            max_seconds is not None
            and declared is not None
            and declared > max_seconds + TRUNCATION_TOLERANCE_S
        ):
            raise _too_long(declared, max_seconds)
        # Normalise every sample format to planar float; layout and rate stay as decoded.
        converter = av.AudioResampler(format="fltp")
        rate = 0
        try:
            for frame in container.decode(stream):
                for out in converter.resample(frame):
                    if out.sample_rate != rate:  # checked before a resampler is built for it
                        rate = out.sample_rate
                        _check_rate(rate, "The file's sample rate")
                    audio.add(out.to_ndarray().T, rate)  # (channels, n) planar -> (n, channels)
                if max_seconds is not None and rate and audio.frames / rate > max_seconds:
                    # Stop early: a highly compressed upload must not expand into unbounded memory.
                    raise _too_long(audio.frames / rate, max_seconds, at_least=True)
            for out in converter.resample(None):
                audio.add(out.to_ndarray().T, out.sample_rate)
        except av.FFmpegError as exc:
            logger.debug("FFmpeg failed while decoding %s/%s: %s", container.format.name, codec, exc)
            raise AudioDecodeError(
                f"The {codec} audio could not be decoded: the file is corrupt or truncated. "
                "Upload the complete file, or re-encode it (for example to WAV or FLAC)."
            ) from exc
        name = _container_name(container.format.name, sniffed)
    total = audio.frames
    if total == 0 or rate == 0:
        raise AudioDecodeError("The file contains no audio samples. Upload a file with audio in it.")
    _check_rate(rate, "The file's sample rate")
    if declared is not None and _is_short_of(declared, total / rate):
        raise _truncated(declared, total / rate)
    return _Decoded(audio, name, codec)


def _uses_soundfile(sniffed: str | None, data: bytes) -> bool:
    if sniffed in ("wav", "flac"):
        return True
    # Ogg/Vorbis (and Ogg/FLAC) go to libsndfile; Ogg/Opus to FFmpeg, whose Opus decoder we prefer.
    return sniffed == "ogg" and b"OpusHead" not in data[:128]


def _decode_container(
    data: bytes, encoding: AudioEncoding, sniffed: str | None, max_seconds: float | None,
    target_rate: int, keep_source: bool,
) -> _Decoded:
    """The container's audio; each decoder that tries gets a sink of its own (a failed try's
    samples are dropped with it)."""
    if sniffed is not None and encoding in _DECLARED_FFMPEG_FORMAT:
        declared_format = _DECLARED_FFMPEG_FORMAT[encoding]
        if declared_format != {"webm": "matroska"}.get(sniffed, sniffed):
            logger.debug(
                "Declared encoding %s but the bytes are %s; decoding as %s", encoding.value, sniffed, sniffed
            )
    if sniffed == "wav":
        _check_wav_complete(data)
    if _uses_soundfile(sniffed, data):
        try:
            return _decode_with_soundfile(data, sniffed or "", max_seconds, MonoAtRate(target_rate, keep_source))
        except sf.LibsndfileError as exc:
            # libsndfile is strict (e.g. WAV holding MP3, lost FLAC sync); FFmpeg gets a second look.
            logger.debug("libsndfile could not decode %s (%s); trying FFmpeg", sniffed, exc)
    forced = None if sniffed is not None else _DECLARED_FFMPEG_FORMAT.get(encoding)
    try:
        return _decode_with_ffmpeg(data, sniffed, forced, max_seconds, MonoAtRate(target_rate, keep_source))
    except AudioDecodeError:
        if forced is None:
            raise
        # The declared format did not fit either: let FFmpeg probe before giving up.
        return _decode_with_ffmpeg(data, sniffed, None, max_seconds, MonoAtRate(target_rate, keep_source))


# --------------------------------------------------------------------------- public decode


def decode_audio(
    data: bytes | bytearray | memoryview,
    *,
    encoding: AudioEncoding | str | None = AudioEncoding.AUTO,
    sample_rate: int | None = None,
    channels: int = 1,
    target_rate: int = MODEL_SAMPLE_RATE_HZ,
    max_seconds: float | None = None,
    keep_channels: bool = False,
) -> DecodedAudio:
    """Decode an upload to float32 mono at `target_rate`.

    `sample_rate` and `channels` describe headerless encodings (LINEAR16, LINEAR32F, MULAW,
    ALAW; channels interleaved); containers carry their own and these are ignored. A declared
    container encoding that does not match the bytes is decoded as what the bytes are; a
    headerless encoding whose body is plainly a file (RIFF/WAVE, fLaC, OggS, ...) likewise.
    `max_seconds` bounds the decoded duration (checked from the header before decoding where
    the header states the length). `keep_channels` also returns every channel on its own (for
    per-channel recognition). Raises an `AudioError` subclass on bad input.
    """
    enc = parse_encoding(encoding)
    if not MIN_SAMPLE_RATE_HZ <= target_rate <= MAX_SAMPLE_RATE_HZ:
        raise ValueError(
            f"target_rate must be in [{MIN_SAMPLE_RATE_HZ}, {MAX_SAMPLE_RATE_HZ}] Hz, got {target_rate}"
        )
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be positive, got {max_seconds}")
    data = bytes(data)
    if not data:
        raise AudioDecodeError(
            "The audio body is empty. Send the audio file (or raw samples) in the request body."
        )

    sniffed = sniff_container(data)
    if enc.headerless and sniffed not in _STRONG_MAGIC:
        decoded = _decode_headerless(data, enc, sample_rate, channels, max_seconds,
                                     MonoAtRate(target_rate, keep_channels))
    else:
        if enc.headerless:
            logger.debug(
                "Declared encoding %s but the body is a %s file; decoding the file", enc.value, sniffed
            )
        decoded = _decode_container(data, enc, sniffed, max_seconds, target_rate, keep_channels)

    audio = decoded.audio
    if audio.frames == 0:
        raise AudioDecodeError("The file contains no audio samples. Upload a file with audio in it.")
    duration = audio.frames / audio.rate
    if max_seconds is not None and duration > max_seconds:
        raise _too_long(duration, max_seconds)
    mono = audio.mono()
    per_channel: tuple[np.ndarray, ...] = ()
    if keep_channels:
        samples = audio.source()
        per_channel = tuple(
            np.ascontiguousarray(samples[:, c], dtype=np.float32) if audio.rate == target_rate
            else soxr.resample(samples[:, c], audio.rate, target_rate, quality=RESAMPLE_QUALITY).astype(
                np.float32, copy=False)
            for c in range(samples.shape[1])
        )
    return DecodedAudio(
        samples=mono,
        sample_rate=target_rate,
        source_rate=audio.rate,
        source_channels=audio.channels,
        duration=len(mono) / target_rate,
        container=decoded.container,
        codec=decoded.codec,
        channels=per_channel,
    )
