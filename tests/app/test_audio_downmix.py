"""Uploads are downmixed and resampled chunk by chunk as they decode (app/audio/downmix.py): the
same samples bit for bit as downmixing and resampling the whole source at once, for a fraction
of the memory."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from app.audio import decode as decode_module
from app.audio import decode_audio
from app.audio.downmix import MonoAtRate
from app.audio.limits import RESAMPLE_QUALITY
from app.audio.pcm import _to_mono
from tests.audio_variants import HEADERLESS_FORMATS, encode_variant


def _speechlike(seconds: float, rate: int, channels: int, seed: int = 0) -> np.ndarray:
    """Noise shaped in loudness like speech (syllable-rate bursts), different in each channel."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * np.arange(n) / rate)
    return (0.2 * envelope[:, None] * rng.standard_normal((n, channels))).astype(np.float32)


def _whole(source: np.ndarray, rate: int) -> np.ndarray:
    """The reference: the whole source downmixed, then resampled in one call."""
    mono = _to_mono(source)
    if rate == 16000:
        return mono
    return soxr.resample(mono, rate, 16000, quality=RESAMPLE_QUALITY).astype(np.float32, copy=False)


@pytest.mark.parametrize(("fmt", "rate", "channels"), [
    ("wav", 16000, 1),  # no resampling
    ("wav", 8000, 1),  # up
    ("flac", 44100, 2),  # libsndfile, in blocks
    ("mp3", 44100, 2),  # FFmpeg, frame by frame
    ("ogg_opus", 48000, 1),
    ("linear16", 48000, 2),  # headerless
])  # fmt: skip
def test_chunked_decode_is_the_whole_source_downmixed_and_resampled(
    fmt: str, rate: int, channels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each decoder's sink also keeps the source chunks it took: the reference is that whole
    source downmixed and resampled in one call."""
    sinks: list[MonoAtRate] = []

    def keeping(target_rate: int, keep_source: bool = False) -> MonoAtRate:
        sinks.append(MonoAtRate(target_rate, keep_source=True))
        return sinks[-1]

    monkeypatch.setattr(decode_module, "MonoAtRate", keeping)
    body = encode_variant(_speechlike(47.3, rate, channels), rate, fmt, channels=channels)
    raw = {"encoding": fmt, "sample_rate": rate, "channels": channels} if fmt in HEADERLESS_FORMATS else {}
    got = decode_audio(body, **raw)  # type: ignore[arg-type]
    (sink,) = sinks
    assert got.source_rate == rate and got.source_channels == channels and got.samples.dtype == np.float32
    assert sink.frames > 40 * rate
    assert np.array_equal(got.samples, _whole(sink.source(), rate))


def test_the_sink_gives_one_shot_samples_whatever_the_chunking() -> None:
    rate = 44100
    source = _speechlike(31.7, rate, 2, seed=3)
    expected = _whole(source, rate)
    rng = np.random.default_rng(4)
    for _ in range(3):
        sink = MonoAtRate(16000, keep_source=True)
        at = 0
        while at < len(source):
            step = int(rng.integers(1, 20000))
            sink.add(source[at : at + step], rate)
            at += step
        assert np.array_equal(sink.mono(), expected)
        assert np.array_equal(sink.source(), source) and sink.frames == len(source)


def test_non_finite_samples_and_a_rate_change_are_refused() -> None:
    from app.audio import AudioDecodeError

    sink = MonoAtRate(16000)
    with pytest.raises(AudioDecodeError, match="NaN or infinite"):
        sink.add(np.array([[0.1], [np.nan]], np.float32), 16000)
    sink = MonoAtRate(16000)
    sink.add(np.zeros((100, 1), np.float32), 16000)
    with pytest.raises(AudioDecodeError, match="sample rate midway"):
        sink.add(np.zeros((100, 1), np.float32), 48000)


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(f"{field}:"))


def test_a_long_stereo_upload_decodes_in_little_more_than_its_result() -> None:
    """Ten minutes of stereo 44.1 kHz FLAC: the decode's peak over what it keeps (37 MiB at 16 kHz
    mono) read +86 MiB; decoded whole first, +404 MiB (the source as float32, twice)."""
    rate = 44100
    body = encode_variant(_speechlike(600.0, rate, 2, seed=5), rate, "flac", channels=2)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # restart the peak (VmHWM) from the current RSS
    except OSError:
        pytest.skip("the peak RSS cannot be restarted here")
    before = _status_mib("VmRSS")
    got = decode_audio(body)
    peak = _status_mib("VmHWM") - before
    kept = got.samples.nbytes / 2**20
    assert got.duration == pytest.approx(600.0, abs=0.1)
    assert peak < 3 * kept + 48, (peak, kept)
