"""Audio at the benchmark's edge: decode any file to float32 mono at 16 kHz, and write WAV.

Every backend gets the same prepared 16 kHz mono PCM16 WAV (bytes for network backends,
the decoded array for in-process ones), so no backend is timed on a different input.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SAMPLE_RATE = 16_000
"""Hz; the rate Whisper-family models and our engine take."""


def decode_file(path: Path) -> np.ndarray:
    """Decode `path` (anything libsndfile or FFmpeg reads) to float32 mono at SAMPLE_RATE."""
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except sf.LibsndfileError:
        data, rate = _decode_with_av(path)
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE)
    return np.ascontiguousarray(mono, dtype=np.float32)


def _decode_with_av(path: Path) -> tuple[np.ndarray, int]:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        frames: list[np.ndarray] = []
        for frame in container.decode(stream):
            frames.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
        frames.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
    if not frames:
        raise ValueError(f"{path}: no audio frames decoded")
    return np.concatenate(frames).astype(np.float32)[:, None], SAMPLE_RATE


def write_wav(path: Path, audio: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), np.clip(audio, -1.0, 1.0), SAMPLE_RATE, subtype="PCM_16")


def read_wav(path: Path) -> np.ndarray:
    """Read a prepared WAV (already 16 kHz mono)."""
    data, rate = sf.read(str(path), dtype="float32")
    if rate != SAMPLE_RATE or data.ndim != 1:
        raise ValueError(f"{path}: expected a prepared 16 kHz mono WAV, got {rate} Hz, shape {data.shape}")
    return np.asarray(data, dtype=np.float32)


def to_pcm16_bytes(audio: np.ndarray) -> bytes:
    """Headerless little-endian PCM16 (the streaming wire format of realtime and gRPC)."""
    return bytes((np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes())


def to_wav_bytes(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.clip(audio, -1.0, 1.0), SAMPLE_RATE, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def write_flac(path: Path, audio: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), np.clip(audio, -1.0, 1.0), SAMPLE_RATE, format="FLAC", subtype="PCM_16")
