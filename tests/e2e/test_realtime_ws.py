"""/v1/realtime end to end against a streaming-mode server: the official `openai` SDK realtime
client at real-time pace, and a raw `websockets` client for binary/base64 frames, several
turns per session, server-VAD turns on a recording with pauses, protocol errors the session
survives, 503 admission and the idle timeout. Every session's events go through
`check_session_events` (committed text never changes, one terminal event per item).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import soxr
import websockets

from tests.audio_variants import encode_variant
from tests.conftest import load_clip, manifest, wer
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_grpc import metric_value
from tests.e2e.test_realtime_common import (
    COMMITTED,
    DELTA,
    PAUSE_CLIPS,
    TERMINAL,
    SessionLog,
    check_session_events,
    chunks_of,
    pcm16_at,
    recording_with_pauses,
    sdk_session,
)

LIVE_DELTA_MIN_AUDIO_S = 8.0  # clips at least this long must show deltas before their audio ends
HOLD_AT_S = 4.0  # ...the client holds its audio there until the first delta came back
SDK_CLIPS = ("libri_2412-153948-0000", "mfa_thoughts")  # 11.7 s and 3.6 s, streamed concurrently
MAX_FRAME_KIB = 64
MAX_INFLIGHT = 3
IDLE_S = 3.0
WER_SLACK = 2.0  # points: a realtime transcript may be this much worse than the offline one
VAD_TOLERANCE_MS = 200
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("realtime"), env={
        "OASR_SERVICE_MODE": "streaming",
        "OASR_MAX_STREAM_FRAME_KIB": str(MAX_FRAME_KIB),
        "OASR_MAX_INFLIGHT": str(MAX_INFLIGHT),
        "OASR_STREAM_IDLE_TIMEOUT_SECS": str(IDLE_S),
        "OASR_VAD": "silero",
    })
    yield srv
    srv.terminate()


def reference(clip_id: str) -> str:
    text = next(c.text for c in manifest() if c.id == clip_id)
    assert text is not None
    return text


def offline_transcript(server: ServerProcess, clip_id: str) -> str:
    path = next(c.path for c in manifest() if c.id == clip_id)
    r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", files={"file": (path.name, path.read_bytes())},
                   data={"model": "whisper-1"}, timeout=TIMEOUT_S)
    r.raise_for_status()
    return str(r.json()["text"])


def streaming_enabled(server: ServerProcess) -> bool:
    info = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()["data"][0]["info"]
    return bool(info.get("streaming_enabled"))


class Raw:
    """A raw WebSocket client that logs every server event."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.log = SessionLog()

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(event))

    async def next(self, kind: str | tuple[str, ...], timeout: float = TIMEOUT_S) -> dict[str, Any]:
        kinds = (kind,) if isinstance(kind, str) else kind
        deadline = time.monotonic() + timeout
        while True:
            message = await asyncio.wait_for(self.ws.recv(), max(deadline - time.monotonic(), 0.01))
            event = json.loads(message)
            self.log.add(event)
            if event["type"] in kinds:
                return event

    async def error(self, code: str) -> dict[str, Any]:
        event = await self.next("error", timeout=30)
        assert event["error"]["code"] == code, event
        return event


def connect(server: ServerProcess, **kwargs: Any) -> Any:
    return websockets.connect(server.ws_url + "/v1/realtime?intent=transcription", max_size=None, **kwargs)


async def manual_session(raw: Raw, fmt: dict[str, Any]) -> None:
    await raw.next("session.created")
    await raw.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": fmt, "turn_detection": None}}}})
    updated = await raw.next("session.updated")
    assert updated["session"]["audio"]["input"]["turn_detection"] is None


# ---------------------------------------------------------------- official SDK


@pytest.fixture(scope="module")
def sdk_logs(server: ServerProcess) -> dict[str, SessionLog]:
    async def run() -> list[SessionLog]:
        clips = [load_clip(c) for c in SDK_CLIPS]
        return await asyncio.gather(*(sdk_session(server.ws_url, pcm16_at(a, 24000), hold_at_s=HOLD_AT_S
                                                  if len(a) / 16000 >= LIVE_DELTA_MIN_AUDIO_S else None)
                                      for a in clips))

    return dict(zip(SDK_CLIPS, asyncio.run(run())))


def test_sdk_session_transcribes_like_offline(server: ServerProcess, sdk_logs: dict[str, SessionLog]) -> None:
    for log in sdk_logs.values():
        check_session_events(log.events)
        assert log.events[0]["type"] == "session.created"
        assert len(log.of_type(COMMITTED)) == 1 and len(log.transcripts()) == 1
    refs = [reference(c) for c in SDK_CLIPS]
    live = [sdk_logs[c].transcripts()[0] for c in SDK_CLIPS]
    offline = [offline_transcript(server, c) for c in SDK_CLIPS]
    assert wer(refs, live) <= wer(refs, offline) + WER_SLACK, (live, offline)
    for c in SDK_CLIPS:  # the audio_end_ms extension covers the whole clip
        done = sdk_logs[c].of_type(TERMINAL[0])[0]
        assert abs(done["audio_end_ms"] - len(load_clip(c)) / 16) <= 30


def test_sdk_session_deltas_arrive_before_audio_ends(server: ServerProcess, sdk_logs: dict[str, SessionLog]) -> None:
    assert streaming_enabled(server), "a streaming-mode server must report streaming_enabled in /v1/models"
    for clip_id, log in sdk_logs.items():
        clip_ms = len(load_clip(clip_id)) / 16
        if clip_ms < LIVE_DELTA_MIN_AUDIO_S * 1000:
            # a 3.6 s clip ends within a few passes; on 2 loaded cores its first pass may not be
            # back before the audio ends, which says nothing about the streaming path
            continue
        # The client held the rest of its audio at HOLD_AT_S until a delta came (a buffering
        # server never sends one and the session times out), so this holds on any machine:
        first = log.first_delta_time()
        assert first is not None and first < log.audio_end, f"{clip_id}: no delta before the audio ended"
        deltas = log.of_type(DELTA)
        assert deltas[0]["audio_end_ms"] <= HOLD_AT_S * 1000 + 100 < clip_ms  # decoded from a prefix of the audio
        assert log.events.index(deltas[0]) < log.events.index(log.of_type(TERMINAL[0])[0])
        assert all(isinstance(e.get("audio_end_ms"), int) for e in deltas)


# ---------------------------------------------------------------- raw websockets


async def test_binary_and_base64_turns_in_one_session(server: ServerProcess) -> None:
    first, second = "ps_goforward", "mfa_thoughts"
    async with connect(server) as ws:
        raw = Raw(ws)
        await manual_session(raw, {"type": "audio/pcm", "rate": 16000})
        for chunk in chunks_of(pcm16_at(load_clip(first), 16000), 3200):  # 100 ms binary frames
            await ws.send(chunk)
        await raw.send({"type": "input_audio_buffer.commit", "event_id": "c1"})
        one = await raw.next(COMMITTED)
        assert one["previous_item_id"] is None
        # second turn: G.711 µ-law at 8 kHz, base64 in input_audio_buffer.append
        await raw.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcmu"}}}}})
        await raw.next("session.updated")
        mulaw = encode_variant(soxr.resample(load_clip(second), 16000, 8000), 8000, "mulaw")
        for chunk in chunks_of(mulaw, 800):
            await raw.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
        await raw.send({"type": "input_audio_buffer.commit"})
        two = await raw.next(COMMITTED)
        assert two["previous_item_id"] == one["item_id"] != two["item_id"]
        while len(raw.log.of_type(TERMINAL[0])) < 2:
            await raw.next(TERMINAL)
    check_session_events(raw.log.events)
    done = {e["item_id"]: e for e in raw.log.of_type(TERMINAL[0])}
    hyps = [done[one["item_id"]]["transcript"], done[two["item_id"]]["transcript"]]
    assert wer([reference(first), reference(second)], hyps) <= 25.0, hyps
    first_ms = len(load_clip(first)) / 16
    assert abs(done[one["item_id"]]["audio_end_ms"] - first_ms) <= 30
    assert abs(done[two["item_id"]]["audio_end_ms"] - first_ms - len(load_clip(second)) / 16) <= 30


async def test_server_vad_turns_on_a_recording_with_pauses(server: ServerProcess) -> None:
    """Two clips with 1.5 s of silence between them, sent in the beta shape; the server's VAD
    finds both turns at the right audio times and transcribes each as its own item."""
    clips = PAUSE_CLIPS
    recording, expected = recording_with_pauses()
    async with connect(server, additional_headers={"OpenAI-Beta": "realtime=v1"}) as ws:
        raw = Raw(ws)
        created = await raw.next("transcription_session.created")
        assert created["session"]["turn_detection"]["type"] == "server_vad"
        await raw.send({"type": "transcription_session.update", "session": {
            "input_audio_format": "pcm16", "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}})
        await raw.next("transcription_session.updated")
        for chunk in chunks_of(pcm16_at(recording, 24000), 4800):  # 100 ms frames, faster than real time
            await ws.send(chunk)
        while len(raw.log.of_type(TERMINAL[0])) < 2:
            await raw.next(TERMINAL)
        await raw.send({"type": "input_audio_buffer.commit"})  # only silence left to commit
        await raw.error("input_audio_buffer_commit_empty")
    check_session_events(raw.log.events)
    started = raw.log.of_type("input_audio_buffer.speech_started")
    stopped = raw.log.of_type("input_audio_buffer.speech_stopped")
    assert len(started) == len(stopped) == 2, [e["type"] for e in raw.log.events]
    tol = VAD_TOLERANCE_MS
    previous_end = 0
    for (on, off), start, stop in zip(expected, started, stopped):
        assert abs(start["speech_start_ms"] - on) <= tol, (start, on)
        assert abs(stop["speech_end_ms"] - off) <= tol, (stop, off)
        assert max(on - 300, previous_end) - tol <= start["audio_start_ms"] <= on + tol  # prefix padding
        assert off - tol <= stop["audio_end_ms"] <= off + 100 + tol  # suffix padding
        assert start["item_id"] == stop["item_id"]
        previous_end = stop["audio_end_ms"]
    items = [e["item_id"] for e in started]
    assert [e["item_id"] for e in raw.log.of_type(COMMITTED)] == items
    done = {e["item_id"]: e for e in raw.log.of_type(TERMINAL[0])}
    hyps = [done[i]["transcript"] for i in items]
    offline = [offline_transcript(server, c) for c in clips]
    refs = [reference(c) for c in clips]
    assert wer(refs, hyps) <= wer(refs, offline) + 10.0, (hyps, offline)
    for item, stop in zip(items, stopped):  # a turn's audio ends where its speech_stopped says
        assert abs(done[item]["audio_end_ms"] - stop["audio_end_ms"]) <= 2


async def test_protocol_errors_leave_the_session_working(server: ServerProcess) -> None:
    async with connect(server) as ws:
        raw = Raw(ws)
        await manual_session(raw, {"type": "audio/pcm", "rate": 24000})
        await ws.send("{not json")
        await raw.error("invalid_json")
        await raw.send({"type": "input_audio_buffer.frobnicate", "event_id": "evt_1"})
        err = await raw.error("unknown_event_type")
        assert err["error"]["event_id"] == "evt_1"
        await raw.send({"type": "response.create"})
        await raw.error("unsupported_event")
        wav = encode_variant(np.asarray(load_clip("ps_cards_001")), 16000, "wav")
        await ws.send(wav)  # a file, not samples
        err = await raw.error("invalid_audio_format")
        assert "/v1/audio/transcriptions" in err["error"]["message"]
        flac = encode_variant(np.asarray(load_clip("ps_cards_001")), 16000, "flac")
        await raw.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(flac).decode()})
        await raw.error("invalid_audio_format")
        await raw.send({"type": "input_audio_buffer.append", "audio": "***"})
        await raw.error("invalid_value")
        await ws.send(b"\x01\x02\x03")  # not whole 16-bit samples
        await raw.error("invalid_audio")
        await ws.send(bytes(MAX_FRAME_KIB * 1024 + 2))
        err = await raw.error("message_too_large")
        assert "--max-stream-frame-kib" in err["error"]["message"]
        await raw.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "turn_detection": {"type": "server_vad", "silence_duration_ms": -200}}}}})
        err = await raw.error("invalid_value")
        assert err["error"]["param"] == "session.audio.input.turn_detection.silence_duration_ms"
        await raw.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "transcription": {"keywords": ["ok", "not\nok"]}, "format": {"type": "audio/pcmu"}}}}})
        err = await raw.error("invalid_value")  # the whole update is refused: the format is unchanged
        assert err["error"]["param"] == "session.audio.input.transcription.keywords[1]"
        await raw.send({"type": "input_audio_buffer.commit"})
        await raw.error("input_audio_buffer_commit_empty")
        # none of that broke the session: a turn still transcribes
        for chunk in chunks_of(pcm16_at(load_clip("ps_cards_001"), 24000), 4800):
            await ws.send(chunk)
        await raw.send({"type": "input_audio_buffer.commit"})
        done = await raw.next(TERMINAL)
    check_session_events(raw.log.events)
    assert done["type"] == TERMINAL[0]
    assert wer([reference("ps_cards_001")], [done["transcript"]]) <= 34.0, done["transcript"]
    assert httpx.get(f"{server.base_url}/readyz", timeout=10).status_code == 200


async def test_clear_drops_the_open_turn(server: ServerProcess) -> None:
    async with connect(server) as ws:
        raw = Raw(ws)
        await manual_session(raw, {"type": "audio/pcm", "rate": 16000})
        for chunk in chunks_of(pcm16_at(load_clip("ps_cards_002"), 16000), 3200):
            await ws.send(chunk)
        await raw.send({"type": "input_audio_buffer.clear"})
        await raw.next("input_audio_buffer.cleared")
        await raw.send({"type": "input_audio_buffer.commit"})
        await raw.error("input_audio_buffer_commit_empty")
        for chunk in chunks_of(pcm16_at(load_clip("ps_cards_003"), 16000), 3200):
            await ws.send(chunk)
        await raw.send({"type": "input_audio_buffer.commit"})
        done = await raw.next(TERMINAL)
    check_session_events(raw.log.events)
    assert [e["error"]["code"] for e in raw.log.of_type("error")] == ["input_audio_buffer_commit_empty"]
    assert len(raw.log.of_type(COMMITTED)) == 1
    assert wer([reference("ps_cards_003")], [done["transcript"]]) <= 34.0, done["transcript"]


def readiness(server: ServerProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{server.base_url}/readyz", timeout=10).json())


async def wait_idle(server: ServerProcess, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until no permit is held and the engine has nothing running (sessions of earlier
    tests end a moment after their clients close)."""
    deadline = time.monotonic() + timeout
    while True:
        state = readiness(server)
        if (state["inflight"], state["running"], state["waiting"]) == (0, 0, 0) or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.2)


async def test_503_when_no_inflight_permit_is_free(server: ServerProcess) -> None:
    await wait_idle(server)
    async with connect(server) as a, connect(server) as b, connect(server) as c:
        for ws in (a, b, c):
            assert json.loads(await ws.recv())["type"] == "session.created"
        with pytest.raises(websockets.InvalidStatus) as exc:
            async with connect(server):
                pass
        assert exc.value.response.status_code == 503
        assert b"max-inflight" in exc.value.response.body
    for _ in range(50):  # the permits come back when the sessions end
        try:
            async with connect(server) as ws:
                assert json.loads(await ws.recv())["type"] == "session.created"
                return
        except websockets.InvalidStatus:
            await asyncio.sleep(0.1)
    pytest.fail("permits were not released after the sessions closed")


async def test_other_intents_are_refused(server: ServerProcess) -> None:
    with pytest.raises(websockets.InvalidStatus) as exc:
        async with websockets.connect(server.ws_url + "/v1/realtime?intent=conversation"):
            pass
    assert exc.value.response.status_code == 400


def cancelled_total(server: ServerProcess) -> float:
    return metric_value(server, "oasr_requests_cancelled_total")


async def test_disconnect_aborts_the_open_turn(server: ServerProcess) -> None:
    before = cancelled_total(server)
    async with connect(server) as ws:
        raw = Raw(ws)
        await manual_session(raw, {"type": "audio/pcm", "rate": 16000})
        audio = chunks_of(pcm16_at(load_clip("ps_cards_005"), 16000), 3200)
        for chunk in audio:
            await ws.send(chunk)
        await raw.send({"type": "input_audio_buffer.clear", "event_id": "sync"})  # a round trip: audio was taken
        await raw.next("input_audio_buffer.cleared")
        for chunk in audio:  # a new turn, never committed
            await ws.send(chunk)
        # a round trip behind the audio: the server has taken it (and opened the turn) before the hang-up
        await raw.send({"type": "session.update", "session": {"type": "transcription"}, "event_id": "sync2"})
        await raw.next("session.updated")
    # the client hung up mid-turn: its engine request is aborted and its permit returned
    state = await wait_idle(server)
    assert (state["inflight"], state["running"], state["waiting"]) == (0, 0, 0), state
    assert not raw.log.of_type("error") and not raw.log.of_type(TERMINAL[1]), raw.log.events
    assert cancelled_total(server) >= before + 2  # the cleared turn and the abandoned one


async def test_idle_session_is_closed(server: ServerProcess) -> None:
    async with connect(server, subprotocols=["realtime"]) as ws:
        assert ws.subprotocol == "realtime"  # browsers fail the handshake unless it is echoed
        raw = Raw(ws)
        await manual_session(raw, {"type": "audio/pcm", "rate": 16000})
        await ws.send(pcm16_at(load_clip("ps_cards_001")[:8000], 16000))  # opens a turn, then silence
        started = time.monotonic()
        err = await raw.error("idle_timeout")
        assert time.monotonic() - started >= IDLE_S - 0.5  # not before the timeout (how late: the load's)
        with pytest.raises(websockets.ConnectionClosedOK) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
        assert "--stream-idle-timeout-secs" in err["error"]["message"]
    state = await wait_idle(server)  # the abandoned turn was aborted, the permit returned
    assert (state["inflight"], state["running"], state["waiting"]) == (0, 0, 0), state

