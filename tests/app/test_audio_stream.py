"""Live audio decoding: `HeaderlessStream` (frames split anywhere), `StreamResampler.cut` at a
turn boundary, and `ContainerStream` (WebM/Ogg Opus, FLAC, WAV, MP3 arriving in pieces) with
real encoders (tests/audio_variants.py)."""

from __future__ import annotations

import asyncio
import itertools
import threading

import numpy as np
import pytest
import soxr

from app.audio import AudioDecodeError, ChannelSplitter, HeaderlessStream, StreamResampler, pcm16_to_float
from app.audio.container_stream import ContainerStream
from tests.audio_variants import encode_variant

RATE = 16000


def tone(seconds: float, rate: int = RATE, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_headerless_stream_carries_split_frames() -> None:
    stereo = np.stack([tone(0.5), -tone(0.5)], axis=1)  # channels cancel when mixed down
    stereo[:, 1] *= 0.5
    data = (stereo * 32767).astype("<i2").tobytes()
    stream = HeaderlessStream("LINEAR16", RATE, channels=2)
    cuts = [0, 1, 2, 3, 7, 1001, 4096, len(data)]
    out = np.concatenate([stream.push(data[a:b]) for a, b in itertools.pairwise(cuts)] + [stream.flush()])
    whole = pcm16_to_float(data).reshape(-1, 2).mean(axis=1)
    np.testing.assert_array_equal(out, whole)


def test_headerless_stream_refuses_a_stream_ending_inside_a_frame() -> None:
    stream = HeaderlessStream("LINEAR16", RATE)
    stream.push(b"\x00\x01\x02")
    with pytest.raises(AudioDecodeError, match="inside a frame"):
        stream.flush()


def test_headerless_mulaw_is_resampled() -> None:
    stream = HeaderlessStream("MULAW", 8000)
    out = np.concatenate([stream.push(b"\xff" * 4000), stream.flush()])
    assert out.size == RATE // 2 and np.abs(out).max() == 0.0  # 0xff is mu-law's zero


def test_cut_releases_the_look_ahead_and_the_stream_goes_on() -> None:
    audio = tone(1.0, 8000)
    resampler = StreamResampler(8000, RATE)
    first = resampler.process(audio[:4000])
    tail = resampler.cut()
    assert first.size + tail.size == pytest.approx(RATE // 2, abs=2)  # all of the first half, now
    second = np.concatenate([resampler.process(audio[4000:]), resampler.flush()])
    assert second.size == pytest.approx(RATE // 2, abs=2)
    # away from the cut, both halves are what a whole-signal resample gives
    whole = soxr.resample(audio, 8000, RATE, quality="HQ")
    np.testing.assert_allclose(np.concatenate([first, tail])[:7000], whole[:7000], atol=1e-4)


async def decode_in_pieces(body: bytes, container: str, piece: int) -> tuple[np.ndarray, list[int]]:
    stream = ContainerStream(container)
    sizes = []
    parts = []
    for i in range(0, len(body), piece):
        out = await stream.push(body[i : i + piece])
        sizes.append(out.size)
        parts.append(out)
    parts.append(await stream.flush())
    stream.close()
    return np.concatenate(parts), sizes


@pytest.mark.parametrize(("fmt", "container"), [("webm_opus", "webm"), ("ogg_opus", "ogg"), ("flac", "flac"),
                                                ("wav", "wav"), ("mp3", "mp3")])
async def test_container_stream_decodes_as_the_bytes_arrive(fmt: str, container: str) -> None:
    audio = tone(3.0, 48000)
    body = encode_variant(audio, 48000, fmt)
    out, sizes = await decode_in_pieces(body, container, 2000)
    expected = 3 * RATE
    assert abs(out.size - expected) <= (0.05 * RATE if fmt == "mp3" else 2)  # mp3 pads its last frame
    assert sum(1 for s in sizes if s) > 1, sizes  # samples came back while the stream was arriving
    if fmt in ("flac", "wav"):  # lossless: the same samples a whole-signal resample gives
        whole = soxr.resample(audio, 48000, RATE, quality="HQ")
        np.testing.assert_allclose(out[100:-100], whole[100 : out.size - 100], atol=1e-3)


async def test_webm_from_a_browser_starts_producing_within_its_first_cluster() -> None:
    body = encode_variant(tone(2.0), RATE, "webm_opus")
    _, sizes = await decode_in_pieces(body, "webm", 1000)
    assert sizes[0] or sizes[1], sizes[:5]


async def test_a_corrupt_container_is_a_decode_error_and_the_thread_ends() -> None:
    junk = np.random.default_rng(0).integers(0, 256, 20000, dtype=np.uint8).tobytes()
    body = b"\x1a\x45\xdf\xa3" + junk  # an EBML magic, then noise
    stream = ContainerStream("webm")
    with pytest.raises(AudioDecodeError, match="webm stream could not be decoded"):
        for i in range(0, len(body), 1000):
            await stream.push(body[i : i + 1000])
        await stream.flush()
    stream.close()
    for _ in range(100):
        if not any(t.name.startswith("container-stream") for t in threading.enumerate()):
            break
        await asyncio.sleep(0.05)
    assert not any(t.name.startswith("container-stream") for t in threading.enumerate())


async def test_close_ends_a_thread_waiting_for_bytes() -> None:
    stream = ContainerStream("webm")
    await stream.push(encode_variant(tone(1.0), RATE, "webm_opus")[:500])
    thread = stream._thread
    assert thread is not None and thread.is_alive()
    stream.close()
    await asyncio.to_thread(thread.join, 10)
    assert not thread.is_alive()


def test_unknown_container_is_refused() -> None:
    with pytest.raises(AudioDecodeError, match="cannot be a mp4"):
        ContainerStream("mp4")


@pytest.mark.parametrize(("encoding", "width"), [("LINEAR16", 2), ("LINEAR32F", 4), ("MULAW", 1)])
def test_channel_splitter_deals_frames_cut_anywhere(encoding: str, width: int) -> None:
    rng = np.random.default_rng(0)
    channels = 3
    body = rng.integers(0, 256, size=width * channels * 1000, dtype=np.uint8).tobytes()
    frames = np.frombuffer(body, np.uint8).reshape(-1, channels, width)
    splitter = ChannelSplitter(encoding, channels)
    got: list[bytes] = [b""] * channels
    for a, b in itertools.pairwise([0, 1, 5, 6, 777, 2048, 2049, len(body)]):
        got = [g + part for g, part in zip(got, splitter.push(body[a:b]))]
    splitter.finish()
    assert got == [frames[:, c, :].tobytes() for c in range(channels)]
    splitter.push(b"\x00")
    with pytest.raises(AudioDecodeError, match="inside a frame"):
        splitter.finish()
