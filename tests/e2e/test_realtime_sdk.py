"""/v1/realtime against the default (offline-mode) server with the official `openai` SDK's
realtime client: a streamed session is buffered and transcribed at the commit, so a stock
client gets exactly one `completed` per turn, after one delta carrying the same text (an item's
deltas always join to its transcript). Ends with a SIGTERM drain that
closes a live session with 1001 (last test: it stops the module's server).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import websockets

from tests.conftest import load_clip, manifest, wer
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_realtime_common import (
    COMMITTED,
    DELTA,
    PAUSE_CLIPS,
    TERMINAL,
    SessionLog,
    check_session_events,
    pcm16_at,
    recording_with_pauses,
    sdk_session,
)

CLIPS = ("libri_61-70968-0000", "ps_cards_005")  # 4.9 s and 3.5 s, streamed concurrently
WER_SLACK_WORDS = 1  # live may get one more word wrong than the offline transcript of the same clips
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def logs(server: ServerProcess) -> dict[str, SessionLog]:
    async def run() -> list[SessionLog]:
        return await asyncio.gather(*(sdk_session(server.ws_url, pcm16_at(load_clip(c), 24000)) for c in CLIPS))

    return dict(zip(CLIPS, asyncio.run(run())))


def offline_transcript(server: ServerProcess, clip_id: str) -> str:
    path = next(c.path for c in manifest() if c.id == clip_id)
    r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", files={"file": (path.name, path.read_bytes())},
                   timeout=TIMEOUT_S)
    r.raise_for_status()
    return str(r.json()["text"])


def test_offline_server_answers_each_turn_with_one_completed(logs: dict[str, SessionLog]) -> None:
    for log in logs.values():
        check_session_events(log.events)
        kinds = [e["type"] for e in log.events]
        assert kinds[:6] == ["session.created", "session.updated", COMMITTED, "conversation.item.added", DELTA,
                             TERMINAL[0]], kinds
        assert kinds[6:] in ([], ["conversation.item.done"]), kinds  # the client stops at the transcript
        (delta,) = log.of_type(DELTA)  # the whole transcript in one delta: deltas always join to it
        assert delta["delta"] == log.of_type(TERMINAL[0])[0]["transcript"]
        session = log.events[1]["session"]
        assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
        assert session["audio"]["input"]["turn_detection"] is None


def test_offline_server_transcripts_match_the_file_api(server: ServerProcess, logs: dict[str, SessionLog]) -> None:
    refs = [next(c.text for c in manifest() if c.id == clip_id) or "" for clip_id in CLIPS]
    live = [logs[c].transcripts()[0] for c in CLIPS]
    offline = [offline_transcript(server, c) for c in CLIPS]
    slack = 100.0 * WER_SLACK_WORDS / sum(len(r.split()) for r in refs)
    assert wer(refs, live) <= wer(refs, offline) + slack, (live, offline)


def test_metrics_count_realtime_sessions(server: ServerProcess, logs: dict[str, SessionLog]) -> None:
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    assert 'oasr_stream_sessions_active{api="realtime"} 0.0' in text
    assert 'oasr_request_duration_seconds_count{api="realtime",mode="streaming",outcome="ok"} 2.0' in text
    assert 'oasr_audio_seconds_total{api="realtime",mode="streaming"}' in text


@pytest.fixture(scope="module")
def pause_wav() -> tuple[bytes, list[tuple[float, float]]]:
    import io

    import soundfile as sf

    recording, expected = recording_with_pauses()
    buf = io.BytesIO()
    sf.write(buf, recording, 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue(), expected


def test_chunking_strategy_segments_at_speech_boundaries(server: ServerProcess,
                                                         pause_wav: tuple[bytes, list[tuple[float, float]]]) -> None:
    """The openai SDK's `chunking_strategy` object (sent as chunking_strategy[...] form fields):
    one verbose_json segment per speech segment, at its place in the recording."""
    import openai

    data, expected = pause_wav
    client = openai.OpenAI(api_key="x", base_url=server.base_url + "/v1", timeout=TIMEOUT_S)
    result = client.audio.transcriptions.create(
        file=("pauses.wav", data), model="whisper-1", response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
        chunking_strategy={"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 200},
    )
    body = result.model_dump()
    segments = body["segments"]
    assert len(segments) == 2, segments
    for seg, (on_ms, off_ms) in zip(segments, expected):
        # boundaries = speech +- the 200 ms padding, within the VAD's resolution
        assert abs(seg["start"] * 1000 - (on_ms - 200)) <= 200, (seg["start"], on_ms)
        assert abs(seg["end"] * 1000 - (off_ms + 200)) <= 200, (seg["end"], off_ms)
        in_segment = [w for w in body["words"] if seg["start"] - 0.05 <= w["start"] <= seg["end"] + 0.05]
        assert in_segment, "word times are not shifted into their segment"
    refs = [next(c.text for c in manifest() if c.id == clip_id) or "" for clip_id in PAUSE_CLIPS]
    assert wer([" ".join(refs)], [body["text"]]) <= 25.0, body["text"]
    assert body["text"] == " ".join(s["text"].strip() for s in segments)
    assert abs(body["duration"] - len(recording_with_pauses()[0]) / 16000) < 0.01


@pytest.mark.parametrize("value", ["auto", '{"type": "server_vad", "threshold": 0.5}'])
def test_chunking_strategy_auto_and_json(server: ServerProcess, pause_wav: tuple[bytes, list[tuple[float, float]]],
                                         value: str) -> None:
    data, expected = pause_wav
    r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", files={"file": ("a.wav", data)},
                   data={"response_format": "verbose_json", "chunking_strategy": value}, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    segments = r.json()["segments"]
    assert len(segments) == 2
    assert segments[0]["end"] < expected[1][0] / 1000 < segments[1]["end"]


@pytest.mark.parametrize("value", ["sometimes", '{"type": "semantic_vad"}', '{"type": "server_vad", "threshold": 2}',
                                   '{"type": "server_vad", "silence": 1}'])
def test_chunking_strategy_bad_values_are_400(server: ServerProcess, value: str) -> None:
    r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF")},
                   data={"chunking_strategy": value}, timeout=TIMEOUT_S)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "chunking_strategy"


async def test_shutdown_closes_live_sessions_with_1001(tmp_path: Path) -> None:
    """SIGTERM stops a server of its own, so no other test depends on running before this one."""
    server = await asyncio.get_running_loop().run_in_executor(None, start_server, tmp_path)
    try:
        await _shutdown_during_a_session(server)
    finally:
        server.terminate()  # a no-op once the test's own SIGTERM has stopped it


async def _shutdown_during_a_session(server: ServerProcess) -> None:
    async with websockets.connect(server.ws_url + "/v1/realtime?intent=transcription") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"turn_detection": None}}}}))
        await ws.send(pcm16_at(load_clip("ps_cards_001"), 24000))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        events = []
        while not any(e["type"] == COMMITTED for e in events):
            events.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
        exit_code = asyncio.get_running_loop().run_in_executor(None, server.terminate)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                events.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001, closed.value
        # the committed item still got its one terminal event: completed, or failed by the drain
        check_session_events(events)
    assert await exit_code == 0
