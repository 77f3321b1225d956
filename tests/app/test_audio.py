"""app.audio: every upload format decodes to 16 kHz mono that matches the source; bad input gets a clear error.

The reference clip is real speech (LibriSpeech, 16 kHz). Each variant is produced by a real
encoder (tests/audio_variants.py) and judged by normalised cross-correlation against the
signal it should decode to: the mono mix at 16 kHz, band-limited to 4 kHz for 8 kHz sources.
`test_similarity_metric_rejects_wrong_rate_and_channel_loss` shows the thresholds fail on the
mistakes they are meant to catch.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
from fractions import Fraction

import av
import numpy as np
import pytest
import soundfile as sf
import soxr

from app import audio
from app.audio import (
    AudioDecodeError,
    AudioDecoder,
    AudioEncoding,
    AudioError,
    AudioTooLongError,
    StreamResampler,
    UnsupportedAudioError,
    alaw_to_float,
    decode_audio,
    headerless_to_mono,
    mulaw_to_float,
    parse_encoding,
    pcm16_to_float,
    sniff_container,
)
from tests.audio_variants import HEADERLESS_FORMATS, VARIANT_FORMATS, encode_variant
from tests.paths import SPEECH_DATA

DATA = SPEECH_DATA
RATE = 16000
RATES = (8000, 16000, 44100, 48000)

# Thresholds on normalised cross-correlation with the expected signal. Measured minima
# (2026-11): lossless 0.9999, G.711 0.9999, MP3 0.994, AAC 0.991, Opus 0.993. Dropping
# one stereo channel scores ~0.64, a wrong rate ~0.0, so these fail on those mistakes.
MIN_CORR = {"lossless": 0.999, "g711": 0.995, "lossy": 0.97}
MAX_LAG_S = 0.005
"""Decoded audio must line up with the source: an untrimmed AAC priming (1024 samples) fails."""
LOSSY_PAD_S = 0.15
"""Lossy codecs may append up to one frame of padding (AAC: 1024 samples = 128 ms at 8 kHz)."""


def _corr_kind(fmt: str) -> str:
    if fmt in ("mulaw", "alaw"):
        return "g711"
    return "lossy" if fmt in ("mp3", "m4a", "ogg_opus", "webm_opus") else "lossless"


def similarity(decoded: np.ndarray, reference: np.ndarray, max_lag: int = 1600) -> tuple[float, int]:
    """Peak normalised cross-correlation within ±max_lag samples, and the lag at the peak."""
    n = min(len(decoded), len(reference))
    a, b = decoded[:n].astype(np.float64), reference[:n].astype(np.float64)
    size = 1 << int(np.ceil(np.log2(2 * n)))
    xc = np.fft.irfft(np.fft.rfft(a, size) * np.conj(np.fft.rfft(b, size)), size)
    window = np.concatenate([xc[-max_lag:], xc[: max_lag + 1]])
    k = int(np.argmax(window))
    return float(window[k] / np.sqrt((a * a).sum() * (b * b).sum())), k - max_lag


def _load(name: str) -> np.ndarray:
    x, rate = sf.read(DATA / name, dtype="float32")
    assert rate == RATE
    return x


@pytest.fixture(scope="module")
def clips() -> tuple[np.ndarray, np.ndarray]:
    """Two different 16 kHz utterances of equal length: left and right channel of stereo variants."""
    left, right = _load("libri_61-70968-0000.flac"), _load("libri_2412-153948-0000.flac")
    n = min(len(left), len(right))
    return left[:n], right[:n]


def _band_limit_8k(x: np.ndarray) -> np.ndarray:
    return soxr.resample(soxr.resample(x, RATE, 8000), 8000, RATE).astype(np.float32)


# ------------------------------------------------------------------ every variant decodes


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("fmt", VARIANT_FORMATS)
def test_variant_decodes_to_16k_mono_matching_source(
    clips: tuple[np.ndarray, np.ndarray], fmt: str, rate: int, channels: int
) -> None:
    left, right = clips
    source = np.stack([left, right], axis=1) if channels == 2 else left
    mix = (left + right) / 2 if channels == 2 else left
    expected = _band_limit_8k(mix) if rate == 8000 else mix
    at_rate = source if rate == RATE else soxr.resample(source, RATE, rate).astype(np.float32)
    body = encode_variant(at_rate, rate, fmt, channels)
    if fmt in HEADERLESS_FORMATS:
        out = decode_audio(body, encoding=fmt, sample_rate=rate, channels=channels)
        assert out.container == "raw"
    else:
        out = decode_audio(body)  # AUTO: the container is sniffed

    assert out.sample_rate == RATE and out.samples.dtype == np.float32 and out.samples.ndim == 1
    assert out.source_channels == channels
    expected_source_rate = 48000 if fmt.endswith("opus") else rate  # Opus always decodes at 48 kHz
    assert out.source_rate == expected_source_rate
    ref_seconds = len(mix) / RATE
    assert out.duration == pytest.approx(len(out.samples) / RATE)
    if _corr_kind(fmt) == "lossy":
        assert ref_seconds - 0.002 <= out.duration <= ref_seconds + LOSSY_PAD_S
    else:
        assert out.duration == pytest.approx(ref_seconds, abs=0.002)
    corr, lag = similarity(out.samples, expected)
    assert corr >= MIN_CORR[_corr_kind(fmt)], f"{fmt}@{rate}x{channels}: corr {corr:.4f}"
    assert abs(lag) <= MAX_LAG_S * RATE, f"{fmt}@{rate}x{channels}: misaligned by {lag} samples"


def test_similarity_metric_rejects_wrong_rate_and_channel_loss(clips: tuple[np.ndarray, np.ndarray]) -> None:
    left, right = clips
    body = encode_variant(left, RATE, "linear16")
    wrong = decode_audio(body, encoding="LINEAR16", sample_rate=8000)  # declared rate is half the real one
    assert wrong.duration == pytest.approx(2 * len(left) / RATE, abs=0.002)
    assert similarity(wrong.samples, left)[0] < 0.3
    mix = (left + right) / 2
    assert similarity(left, mix)[0] < MIN_CORR["lossy"]  # a decoder keeping only channel 0
    noise = np.random.default_rng(0).standard_normal(len(left)).astype(np.float32)
    assert similarity(noise, left)[0] < 0.1


def test_variant_encodes_declared_encoding_and_auto_agree(clips: tuple[np.ndarray, np.ndarray]) -> None:
    left, _ = clips
    for fmt, encoding in [("flac", "FLAC"), ("mp3", "MP3"), ("wav", "WAV"), ("ogg_opus", "OGG_OPUS")]:
        body = encode_variant(left, RATE, fmt)
        declared, auto = decode_audio(body, encoding=encoding), decode_audio(body)
        np.testing.assert_array_equal(declared.samples, auto.samples)


# ------------------------------------------------------------------ real files from the dataset


def _manifest() -> dict[str, dict[str, object]]:
    with open(DATA / "manifest.jsonl") as f:
        return {row["id"]: row for row in map(json.loads, f)}


@pytest.mark.parametrize("clip_id", ["cv_en_22058264", "cv_en_22058266", "cv_en_22058267"])
def test_dataset_mp3_decodes(clip_id: str) -> None:
    row = _manifest()[clip_id]
    out = decode_audio((DATA / str(row["audio"])).read_bytes())
    assert (out.container, out.codec, out.source_rate, out.sample_rate) == ("mp3", "mp3", 48000, RATE)
    assert out.duration == pytest.approx(float(row["duration"]), abs=0.1)  # type: ignore[arg-type]
    assert 0.005 < float(np.sqrt(np.mean(out.samples**2))) < 0.5  # speech, not silence or garbage


def test_dataset_stereo_wav_is_mean_of_channels() -> None:
    path = DATA / "fw_stereo_diarization.wav"
    stereo, rate = sf.read(path, dtype="float32")
    out = decode_audio(path.read_bytes())
    assert (rate, out.source_channels, out.container, out.codec) == (RATE, 2, "wav", "pcm_s16le")
    np.testing.assert_allclose(out.samples, stereo.mean(axis=1), atol=1e-6)


def test_dataset_44k_stereo_flac_resamples() -> None:
    path = DATA / "jfk_inaugural.flac"
    stereo, rate = sf.read(path, dtype="float32")
    out = decode_audio(path.read_bytes())
    assert (out.source_rate, out.source_channels, out.codec) == (44100, 2, "flac")
    expected = soxr.resample(stereo.mean(axis=1), rate, RATE)
    corr, lag = similarity(out.samples, expected)
    assert corr > 0.9999 and lag == 0


# ------------------------------------------------------------------ encodings and helpers


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("LINEAR16", AudioEncoding.LINEAR16),
        ("linear16", AudioEncoding.LINEAR16),
        ("pcm16", AudioEncoding.LINEAR16),
        ("pcm_s16le", AudioEncoding.LINEAR16),
        ("mulaw", AudioEncoding.MULAW),
        ("PCMU", AudioEncoding.MULAW),
        ("g711_ulaw", AudioEncoding.MULAW),
        ("alaw", AudioEncoding.ALAW),
        ("pcma", AudioEncoding.ALAW),
        ("linear32f", AudioEncoding.LINEAR32F),
        ("m4a", AudioEncoding.AUTO),
        ("aac", AudioEncoding.AUTO),
        ("mp4", AudioEncoding.AUTO),
        ("ENCODING_UNSPECIFIED", AudioEncoding.AUTO),
        ("", AudioEncoding.AUTO),
        (None, AudioEncoding.AUTO),
        ("webm_opus", AudioEncoding.WEBM_OPUS),
        (AudioEncoding.FLAC, AudioEncoding.FLAC),
    ],
)
def test_parse_encoding(given: str | None, expected: AudioEncoding) -> None:
    assert parse_encoding(given) is expected


def test_unknown_encoding_names_the_valid_ones() -> None:
    with pytest.raises(UnsupportedAudioError) as err:
        parse_encoding("AMR_WB")
    assert err.value.status_code == 400
    for name in ("LINEAR16", "MULAW", "FLAC", "MP3", "OGG_OPUS", "WEBM_OPUS", "AUTO"):
        assert name in str(err.value)
    with pytest.raises(UnsupportedAudioError):
        decode_audio(b"\x00\x00", encoding="speex")


def test_g711_tables_match_libsndfile() -> None:
    codes = bytes(range(256))
    for subtype, ours in (("ULAW", mulaw_to_float), ("ALAW", alaw_to_float)):
        theirs, _ = sf.read(io.BytesIO(codes), samplerate=8000, channels=1, format="RAW", subtype=subtype)
        np.testing.assert_array_equal(ours(codes), theirs.astype(np.float32))


def test_pcm16_to_float() -> None:
    values = np.array([0, 1, -1, 32767, -32768], dtype="<i2")
    np.testing.assert_array_equal(pcm16_to_float(values.tobytes()), values / np.float32(32768))
    with pytest.raises(AudioDecodeError, match="even number of bytes"):
        pcm16_to_float(b"\x00\x01\x02")


def test_sniff_container_raw_streams() -> None:
    assert sniff_container(b"\xff\xf1\x50\x80\x02\x1f\xfc") == "aac"  # ADTS header
    assert sniff_container(b"\xff\xfb\x90\x64\x00") == "mp3"  # MPEG-1 layer III frame header
    assert sniff_container(b"ID3\x04\x00\x00\x00\x00\x00\x00fLaC") == "flac"
    assert sniff_container(b"\x00\x00\x01\x00" * 4) is None  # PCM silence stays unrecognised


@pytest.mark.parametrize("fmt", sorted(HEADERLESS_FORMATS))
def test_headerless_chunks_match_whole_decode(clips: tuple[np.ndarray, np.ndarray], fmt: str) -> None:
    stereo = np.stack(clips, axis=1)
    body = encode_variant(stereo, RATE, fmt, channels=2)
    frame = len(body) // len(stereo)
    cut = 1000 * frame  # chunk boundaries on whole frames
    chunks = [body[i : i + cut] for i in range(0, len(body), cut)]
    streamed = np.concatenate([headerless_to_mono(c, fmt, channels=2) for c in chunks])
    whole = decode_audio(body, encoding=fmt, sample_rate=RATE, channels=2)
    np.testing.assert_array_equal(streamed, whole.samples)
    with pytest.raises(AudioDecodeError, match="whole number"):
        headerless_to_mono(body[: frame + 1], fmt, channels=2)
    with pytest.raises(UnsupportedAudioError):
        headerless_to_mono(body, "MP3")


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("wav", "wav"),
        ("flac", "flac"),
        ("mp3", "mp3"),
        ("m4a", "mp4"),
        ("ogg_opus", "ogg"),
        ("webm_opus", "webm"),
    ],
)
def test_sniff_container(clips: tuple[np.ndarray, np.ndarray], fmt: str, expected: str) -> None:
    assert sniff_container(encode_variant(clips[0][:8000], RATE, fmt)) == expected


def test_declared_container_that_does_not_match_is_decoded_as_what_it_is(
    clips: tuple[np.ndarray, np.ndarray],
) -> None:
    left, _ = clips
    wav = encode_variant(left, RATE, "wav")
    out = decode_audio(wav, encoding="MP3")
    assert (out.container, out.codec) == ("wav", "pcm_s16le")
    # A WAV file sent as LINEAR16 is read with its header, not as samples (header bytes would click).
    out = decode_audio(wav, encoding="LINEAR16", sample_rate=8000)
    assert out.source_rate == RATE and similarity(out.samples, left)[0] > 0.999


# ------------------------------------------------------------------ errors


def _error(exc_type: type[AudioError], body: bytes, **kwargs: object) -> AudioError:
    with pytest.raises(exc_type) as err:
        decode_audio(body, **kwargs)  # type: ignore[arg-type]
    return err.value


def test_empty_body() -> None:
    err = _error(AudioDecodeError, b"")
    assert err.status_code == 400 and "empty" in str(err)


@pytest.mark.parametrize("encoding", ["AUTO", "MP3", "FLAC", "WAV", "OGG_OPUS", "WEBM_OPUS"])
def test_garbage_bytes(encoding: str) -> None:
    for body in (np.random.default_rng(1).bytes(20000), b"this is not audio at all\n" * 50):
        err = _error(AudioDecodeError, body, encoding=encoding)
        assert "WAV, FLAC, MP3" in str(err)  # tells the user what to send instead


def test_truncated_wav(clips: tuple[np.ndarray, np.ndarray]) -> None:
    wav = encode_variant(clips[0], RATE, "wav")
    assert "truncated" in str(_error(AudioDecodeError, wav[: len(wav) // 2]))
    _error(AudioDecodeError, wav[:30])  # cut inside the header


def test_truncated_mp3(clips: tuple[np.ndarray, np.ndarray]) -> None:
    mp3 = encode_variant(clips[0], RATE, "mp3")
    assert "truncated" in str(_error(AudioDecodeError, mp3[: len(mp3) // 2]))
    _error(AudioDecodeError, mp3[:200])


def test_truncated_flac(clips: tuple[np.ndarray, np.ndarray]) -> None:
    flac = encode_variant(clips[0], RATE, "flac")
    assert "truncated" in str(_error(AudioDecodeError, flac[: len(flac) // 2]))


def test_streamed_wav_without_length_is_accepted(clips: tuple[np.ndarray, np.ndarray]) -> None:
    wav = bytearray(encode_variant(clips[0], RATE, "wav"))
    pos = wav.find(b"data")
    wav[pos + 4 : pos + 8] = (0xFFFFFFFF).to_bytes(4, "little")  # what pipe writers put before the end
    out = decode_audio(bytes(wav))
    assert out.duration == pytest.approx(len(clips[0]) / RATE, abs=0.002)


def test_streamed_flac_without_length(clips: tuple[np.ndarray, np.ndarray]) -> None:
    """STREAMINFO total_samples = 0 (written by non-seekable encoders) means 'unknown', not 'huge'."""
    flac = bytearray(encode_variant(clips[0], RATE, "flac"))
    fields = int.from_bytes(flac[18:26], "big")  # rate(20) channels(3) bits(5) total_samples(36)
    flac[18:26] = (fields & ~((1 << 36) - 1)).to_bytes(8, "big")
    out = decode_audio(bytes(flac), max_seconds=6.0)
    assert out.duration == pytest.approx(len(clips[0]) / RATE, abs=0.002)
    _error(AudioTooLongError, bytes(flac), max_seconds=2.0)


def test_ogg_vorbis_decodes(clips: tuple[np.ndarray, np.ndarray]) -> None:
    buf = io.BytesIO()
    sf.write(buf, clips[0], RATE, format="OGG", subtype="VORBIS")
    out = decode_audio(buf.getvalue())
    assert (out.container, out.codec) == ("ogg", "vorbis")
    assert similarity(out.samples, clips[0])[0] >= MIN_CORR["lossy"]


class _Pipe:
    """A write-only sink: muxers cannot seek back, as in a browser's MediaRecorder or a pipe."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, chunk: bytes) -> int:
        self.data += chunk
        return len(chunk)


def test_live_webm_without_duration(clips: tuple[np.ndarray, np.ndarray]) -> None:
    """WebM as browsers record it: no Duration element, so no length to check against."""
    signal = soxr.resample(clips[0], RATE, 48000).astype(np.float32)
    sink = _Pipe()
    with av.open(sink, mode="w", format="webm") as out:
        stream = out.add_stream("libopus", rate=48000, layout="mono")
        frame = av.AudioFrame.from_ndarray(signal[None, :], format="fltp", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = 48000, 0, Fraction(1, 48000)
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    body = bytes(sink.data)
    with av.open(io.BytesIO(body)) as probe:
        assert probe.duration is None
    out_audio = decode_audio(body, max_seconds=30.0)
    assert (out_audio.container, out_audio.codec) == ("webm", "opus")
    assert similarity(out_audio.samples, clips[0])[0] >= MIN_CORR["lossy"]


def test_video_file_uses_its_audio_track(clips: tuple[np.ndarray, np.ndarray]) -> None:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        video = out.add_stream("mpeg4", rate=25)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        sound = out.add_stream("aac", rate=RATE, layout="mono")
        packets = []
        for i in range(120):
            picture = av.VideoFrame.from_ndarray(np.full((48, 64, 3), i, np.uint8), format="rgb24")
            picture.pts, picture.time_base = i, Fraction(1, 25)
            packets += video.encode(picture)
        frame = av.AudioFrame.from_ndarray(clips[0][None, :], format="fltp", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = RATE, 0, Fraction(1, RATE)
        packets += [*sound.encode(frame), *sound.encode(None), *video.encode(None)]
        for packet in packets:
            out.mux(packet)
    decoded = decode_audio(buf.getvalue())
    assert (decoded.container, decoded.codec, decoded.source_rate) == ("mp4", "aac", RATE)
    assert similarity(decoded.samples, clips[0])[0] >= MIN_CORR["lossy"]


def test_file_without_samples() -> None:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(0, dtype=np.float32), RATE, format="WAV")
    assert "no audio samples" in str(_error(AudioDecodeError, buf.getvalue()))


@pytest.mark.parametrize("encoding", ["LINEAR16", "LINEAR32F", "MULAW", "ALAW"])
def test_headerless_without_sample_rate(encoding: str) -> None:
    for missing in (None, 0):
        err = _error(AudioDecodeError, b"\x01\x02\x03\x04", encoding=encoding, sample_rate=missing)
        assert "sample rate" in str(err) and encoding in str(err)


@pytest.mark.parametrize("rate", [3999, 1000, 384001, 1_000_000])
def test_sample_rate_out_of_range(rate: int) -> None:
    err = _error(UnsupportedAudioError, b"\x00\x00" * 100, encoding="LINEAR16", sample_rate=rate)
    assert "4000" in str(err) and "384000" in str(err)


def test_container_sample_rate_out_of_range() -> None:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(2000, dtype=np.float32), 2000, format="WAV")
    _error(UnsupportedAudioError, buf.getvalue())


def test_bad_channels_and_partial_frames() -> None:
    for channels in (0, -1, 33):
        _error(AudioDecodeError, b"\x00" * 64, encoding="LINEAR16", sample_rate=RATE, channels=channels)
    err = _error(AudioDecodeError, b"\x00" * 6, encoding="LINEAR16", sample_rate=RATE, channels=2)
    assert "4-byte frames" in str(err)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_linear32f(bad: float) -> None:
    samples = np.zeros(1600, dtype="<f4")
    samples[800] = bad
    err = _error(AudioDecodeError, samples.tobytes(), encoding="LINEAR32F", sample_rate=RATE)
    assert "NaN" in str(err)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3", "m4a", "ogg_opus", "webm_opus", "linear16", "mulaw"])
def test_too_long(clips: tuple[np.ndarray, np.ndarray], fmt: str) -> None:
    body = encode_variant(clips[0], RATE, fmt)  # 4.9 s
    kwargs: dict[str, object] = {"encoding": fmt, "sample_rate": RATE} if fmt in HEADERLESS_FORMATS else {}
    err = _error(AudioTooLongError, body, max_seconds=2.0, **kwargs)
    assert err.status_code == 413 and "2 s limit" in str(err)
    assert decode_audio(body, max_seconds=6.0, **kwargs).duration < 6.0  # type: ignore[arg-type]


def test_error_hierarchy() -> None:
    assert issubclass(AudioDecodeError, AudioError) and issubclass(UnsupportedAudioError, AudioError)
    assert issubclass(AudioTooLongError, AudioError)
    assert (
        AudioDecodeError.status_code,
        UnsupportedAudioError.status_code,
        AudioTooLongError.status_code,
    ) == (
        400,
        400,
        413,
    )


def test_all_is_complete() -> None:
    public = {
        name
        for name, value in vars(audio).items()
        if not name.startswith("_") and (getattr(value, "__module__", None) or "").startswith(audio.__name__ + ".")
    }
    assert public, "app.audio re-exports its submodules' public names"
    assert public <= set(audio.__all__)


# ------------------------------------------------------------------ AudioDecoder


async def test_audio_decoder_bounds_concurrency(
    clips: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a pool of 2, a third decode does not start until one of the first two finishes."""
    real_decode = audio.decode_audio
    lock = threading.Condition()
    running = peak = entered = 0
    gate = threading.Event()

    def gated_decode(*args: object, **kwargs: object) -> audio.DecodedAudio:
        nonlocal running, peak, entered
        with lock:
            running += 1
            entered += 1
            peak = max(peak, running)
            lock.notify_all()
        gate.wait(timeout=30)
        try:
            return real_decode(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(audio, "decode_audio", gated_decode)
    body = encode_variant(clips[0], 44100, "flac")
    with AudioDecoder(max_concurrent_decodes=2) as decoder:
        tasks = [asyncio.create_task(decoder.decode(body)) for _ in range(6)]

        def wait_for(count: int, timeout: float) -> bool:
            with lock:
                return lock.wait_for(lambda: entered >= count, timeout=timeout)

        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, wait_for, 2, 10.0)
        # A third decode would enter within microseconds if the pool were unbounded.
        assert not await loop.run_in_executor(None, wait_for, 3, 0.3)
        gate.set()
        results = await asyncio.gather(*tasks)
    assert peak == 2 and entered == 6
    assert all(r.sample_rate == RATE and r.source_rate == 44100 for r in results)


async def test_audio_decoder_propagates_errors_and_closes() -> None:
    decoder = AudioDecoder(max_concurrent_decodes=1)
    with pytest.raises(AudioDecodeError):
        await decoder.decode(b"")
    out = await decoder.decode(b"\x00\x00" * 16000, encoding="pcm16", sample_rate=8000)
    assert out.duration == pytest.approx(2.0)
    decoder.close()
    with pytest.raises(RuntimeError):
        await decoder.decode(b"\x00\x00", encoding="pcm16", sample_rate=8000)
    with pytest.raises(ValueError):
        AudioDecoder(max_concurrent_decodes=0)


# ------------------------------------------------------------------ StreamResampler


@pytest.mark.parametrize("in_rate", [8000, 44100, 48000])
def test_stream_resampler_matches_one_shot(clips: tuple[np.ndarray, np.ndarray], in_rate: int) -> None:
    signal = soxr.resample(clips[0], RATE, in_rate).astype(np.float32)
    one_shot = soxr.resample(signal, in_rate, RATE, quality=audio.RESAMPLE_QUALITY)
    resampler = StreamResampler(in_rate, RATE)
    bounds = np.cumsum(np.random.default_rng(2).integers(1, 3000, size=len(signal) // 1000))
    pieces = [resampler.process(chunk) for chunk in np.split(signal, bounds[bounds < len(signal)])]
    pieces.append(resampler.flush())
    streamed = np.concatenate(pieces)
    assert abs(len(streamed) - len(one_shot)) <= 1
    n = min(len(streamed), len(one_shot))
    np.testing.assert_allclose(streamed[:n], one_shot[:n], atol=1e-4)
    with pytest.raises(RuntimeError):
        resampler.process(signal[:10])


def test_stream_resampler_equal_rates_and_validation() -> None:
    resampler = StreamResampler(RATE, RATE)
    chunk = np.linspace(-1, 1, 160, dtype=np.float32)
    np.testing.assert_array_equal(resampler.process(chunk), chunk)
    assert resampler.flush().size == 0
    with pytest.raises(UnsupportedAudioError):
        StreamResampler(1000, RATE)
    with pytest.raises(AudioDecodeError):
        StreamResampler(8000, RATE).process(np.array([0.0, np.nan], dtype=np.float32))
