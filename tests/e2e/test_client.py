"""`oasr.client` against a live server (the module's `uvicorn --factory app.main:create_app` on the embedded tiny.en,
offline mode, a 4 s realtime resume grace): REST transcription (sync and async), the realtime
WebSocket with a connection cut mid-stream and resumed, and gRPC Recognize."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from oasr import APIError, AsyncOASRClient, OASRClient, ServerUnreachable, StreamEvent
from oasr.audio import read_pcm16
from tests.conftest import manifest
from tests.e2e.conftest import ServerProcess, free_port, start_server
from tests.e2e.test_realtime_resume import cutting_proxy

CLIP = "libri_61-70968-0000"  # 4.9 s, one utterance
RESUME_GRACE_S = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("client"),
                       env={"OASR_REALTIME_RESUME_GRACE_SECS": str(RESUME_GRACE_S)})
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def clip_path() -> Path:
    return next(c for c in manifest() if c.id == CLIP).path


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


REFERENCE = words(next(c for c in manifest() if c.id == CLIP).text or "")


def test_transcribe_over_rest(server: ServerProcess, clip_path: Path) -> None:
    with OASRClient(server.base_url) as client:
        plain = client.transcribe(clip_path)
        timed = client.transcribe(clip_path.read_bytes(), response_format="verbose_json",
                                  timestamp_granularities=["word"])
        srt = client.transcribe(clip_path, response_format="srt")
        models = client.models()
        with pytest.raises(APIError) as refused:  # tiny.en is English-only
            client.translate(clip_path, language="fr")
    assert words(plain.text) == REFERENCE
    assert timed.text == plain.text and timed.language == "english" and timed.duration == pytest.approx(4.9, abs=0.01)
    assert [w["word"].strip() for w in timed.words] == plain.text.split()  # literal words, in order
    starts = [w["start"] for w in timed.words]
    assert starts == sorted(starts) and all(w["end"] >= w["start"] for w in timed.words)
    assert srt.text.startswith("1\n00:00:0") and plain.text.strip() in srt.text
    assert models and models[0]["info"]["family"] == "whisper"
    # translations take `language` now (the source): French is refused first, for the same reason
    assert refused.value.status == 400 and "English-only" in refused.value.message


async def test_async_transcribe_and_recognize(server: ServerProcess, clip_path: Path) -> None:
    async with AsyncOASRClient(server.base_url, grpc_target=server.grpc_target) as client:
        rest = await client.transcribe(clip_path)
        rpc = await client.recognize(clip_path, word_time_offsets=True)
    assert words(rest.text) == REFERENCE
    assert words(rpc.transcript) == REFERENCE and rpc.request_id
    assert [w["word"] for w in rpc.words] == rpc.transcript.split()


def test_recognize_over_grpc(server: ServerProcess, clip_path: Path) -> None:
    pcm = read_pcm16(clip_path, 16000)
    with OASRClient(server.base_url, grpc_target=server.grpc_target) as client:
        from_file = client.recognize(clip_path)
        from_pcm = client.recognize(pcm, encoding="LINEAR16", sample_rate=16000)
        with pytest.raises(APIError) as refused:  # headerless PCM needs its rate
            client.recognize(pcm, encoding="LINEAR16")
    assert words(from_file.transcript) == REFERENCE and words(from_pcm.transcript) == REFERENCE
    assert refused.value.status == "INVALID_ARGUMENT" and "sample_rate" in refused.value.message


def finals(events: list[StreamEvent]) -> list[str]:
    return [e.text for e in events if e.type == "final"]


async def test_stream_survives_a_cut_connection(server: ServerProcess, clip_path: Path) -> None:
    """The same file streamed directly and through a proxy that cuts the connection halfway
    through the audio: the session is resumed and the transcript is the same."""
    async with AsyncOASRClient(server.base_url) as client:
        direct = [e async for e in client.stream_file(clip_path, language="en")]
    audio_bytes = len(read_pcm16(clip_path, 16000))
    async with cutting_proxy(server.port, cut_after=audio_bytes // 2) as port, \
            AsyncOASRClient(f"http://127.0.0.1:{port}") as client:
        cut = [e async for e in client.stream_file(clip_path, speed=8.0, language="en")]
    assert [e.type for e in direct].count("final") == 1 and words(finals(direct)[0]) == REFERENCE
    assert [e.type for e in cut].count("resumed") == 1
    resumed = next(e for e in cut if e.type == "resumed")
    assert resumed.audio_end_ms is not None and 0 < resumed.audio_end_ms < 4900
    assert finals(cut) == finals(direct)
    assert cut[-1].type == "final" and cut[-1].is_final


def test_sync_stream_of_chunks(server: ServerProcess, clip_path: Path) -> None:
    pcm = read_pcm16(clip_path, 16000)
    chunks = (pcm[i: i + 3200] for i in range(0, len(pcm), 3200))  # 100 ms frames from a generator
    with OASRClient(server.base_url) as client:
        events = list(client.stream(chunks, sample_rate=16000, language="en"))
    assert events[-1].type == "final" and words(events[-1].text) == REFERENCE
    assert all(e.item_id == events[-1].item_id for e in events if e.type in ("partial", "final"))


def test_unreachable_server() -> None:
    with OASRClient(f"http://127.0.0.1:{free_port()}") as client, pytest.raises(ServerUnreachable):
        client.models()
