"""Encoding names (`AudioEncoding`, `parse_encoding`) and container sniffing from magic bytes."""

from __future__ import annotations

import enum

from app.audio.errors import UnsupportedAudioError

__all__ = ["AudioEncoding", "parse_encoding", "sniff_container"]


class AudioEncoding(str, enum.Enum):
    """How the uploaded bytes are encoded; names match gRPC `RecognitionConfig.AudioEncoding`."""

    AUTO = "AUTO"
    """Sniff the container from its magic bytes (Google's ENCODING_UNSPECIFIED)."""
    LINEAR16 = "LINEAR16"
    """Headerless little-endian signed 16-bit PCM, channels interleaved."""
    LINEAR32F = "LINEAR32F"
    """Headerless little-endian IEEE float32 PCM, channels interleaved."""
    MULAW = "MULAW"
    """Headerless G.711 μ-law, one byte per sample."""
    ALAW = "ALAW"
    """Headerless G.711 A-law, one byte per sample."""
    FLAC = "FLAC"
    MP3 = "MP3"
    WAV = "WAV"
    OGG_OPUS = "OGG_OPUS"
    WEBM_OPUS = "WEBM_OPUS"

    @property
    def headerless(self) -> bool:
        """True when the bytes carry no rate or channel count, so the caller must give them."""
        return self in _SAMPLE_WIDTH_BYTES


_SAMPLE_WIDTH_BYTES = {
    AudioEncoding.LINEAR16: 2,
    AudioEncoding.LINEAR32F: 4,
    AudioEncoding.MULAW: 1,
    AudioEncoding.ALAW: 1,
}

_ENCODING_ALIASES: dict[str, AudioEncoding] = {
    "": AudioEncoding.AUTO,
    "encoding_unspecified": AudioEncoding.AUTO,
    # Containers FFmpeg reads but that have no enum value of their own: sniffed like AUTO.
    "m4a": AudioEncoding.AUTO,
    "mp4": AudioEncoding.AUTO,
    "aac": AudioEncoding.AUTO,
    "ogg": AudioEncoding.AUTO,
    "webm": AudioEncoding.AUTO,
    "opus": AudioEncoding.AUTO,
    "pcm": AudioEncoding.LINEAR16,
    "pcm16": AudioEncoding.LINEAR16,
    "pcm_s16le": AudioEncoding.LINEAR16,
    "s16le": AudioEncoding.LINEAR16,
    "l16": AudioEncoding.LINEAR16,
    "pcm_f32le": AudioEncoding.LINEAR32F,
    "f32le": AudioEncoding.LINEAR32F,
    "float32": AudioEncoding.LINEAR32F,
    "pcm_f32": AudioEncoding.LINEAR32F,
    "ulaw": AudioEncoding.MULAW,
    "mu-law": AudioEncoding.MULAW,
    "pcmu": AudioEncoding.MULAW,
    "pcm_mulaw": AudioEncoding.MULAW,
    "g711_ulaw": AudioEncoding.MULAW,
    "a-law": AudioEncoding.ALAW,
    "pcma": AudioEncoding.ALAW,
    "pcm_alaw": AudioEncoding.ALAW,
    "g711_alaw": AudioEncoding.ALAW,
    "wave": AudioEncoding.WAV,
    "mpeg": AudioEncoding.MP3,
    "mpga": AudioEncoding.MP3,
}


def parse_encoding(value: str | AudioEncoding | None) -> AudioEncoding:
    """Map a user-given encoding name (any case, or a common alias) to `AudioEncoding`.

    None and "" mean AUTO. Raises UnsupportedAudioError naming the accepted values.
    """
    if isinstance(value, AudioEncoding):
        return value
    key = (value or "").strip().lower()
    try:
        return AudioEncoding(key.upper())
    except ValueError:
        pass
    if key in _ENCODING_ALIASES:
        return _ENCODING_ALIASES[key]
    valid = ", ".join(e.value for e in AudioEncoding)
    raise UnsupportedAudioError(
        f"Unknown audio encoding {value!r}. Use one of {valid} (case-insensitive; aliases such as "
        "pcm16, pcmu/mulaw, pcma/alaw are accepted), or AUTO to detect the file format."
    )


# --------------------------------------------------------------------------- sniffing


def _id3v2_end(data: bytes) -> int:
    """Offset just past a leading ID3v2 tag (0 when there is none)."""
    if len(data) < 10 or data[:3] != b"ID3":
        return 0
    size = 0
    for b in data[6:10]:  # four 7-bit "syncsafe" bytes
        size = (size << 7) | (b & 0x7F)
    footer = 10 if data[5] & 0x10 else 0
    return 10 + size + footer


def _is_mpeg_audio_frame(head: bytes) -> bool:
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return False
    layer = (head[1] >> 1) & 0x03
    bitrate_index = head[2] >> 4
    rate_index = (head[2] >> 2) & 0x03
    return layer != 0 and bitrate_index != 0x0F and rate_index != 0x03


def _is_adts_frame(head: bytes) -> bool:
    return len(head) >= 2 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0


def sniff_container(data: bytes) -> str | None:
    """Name the container from magic bytes, or None when nothing is recognised.

    Names: wav, flac, ogg, mp3, aac (ADTS), webm (any EBML/Matroska), mp4 (ISO-BMFF),
    aiff, caf, amr.
    """
    head = data[:16]
    if len(head) >= 12 and head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    if len(head) >= 8 and head[4:8] == b"ftyp":
        return "mp4"
    if len(head) >= 12 and head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:4] == b"caff":
        return "caf"
    if head[:5] == b"#!AMR":
        return "amr"
    start = _id3v2_end(data)
    if start:
        after = data[start : start + 4]
        if after == b"fLaC":  # some taggers put ID3 in front of FLAC
            return "flac"
        return "aac" if _is_adts_frame(after) else "mp3"
    if _is_mpeg_audio_frame(head):
        return "mp3"
    if _is_adts_frame(head):
        return "aac"
    return None
