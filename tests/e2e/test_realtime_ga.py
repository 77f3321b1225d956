"""GA transcription sessions end to end on a streaming-mode server with an API key, through the
official `openai` SDK (issue 15 must-show 1) and raw `websockets` clients:

- a session with keywords, include logprobs, delay, G.711 µ-law input and server VAD on a
  two-utterance dev recording: one `completed` per turn with usage, append-only deltas with
  logprobs that join to the `completed` transcript, the keyword spelled right, and every server
  event valid against the GA schemas (tests/schemas);
- ephemeral client secrets (GA and beta routes) open a session bound to their configuration,
  once; a reused or unknown secret gets 401;
- semantic_vad and noise_reduction sessions.

Pacing: audio goes out at real time; how many deltas a turn gets depends on the server's pace
(its last one comes with the final), so nothing here asserts on their number or timing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pytest
import soxr
import websockets
from whisper_normalizer.english import EnglishTextNormalizer

from tests.audio_variants import encode_variant
from tests.conftest import load_clip, manifest, wer
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_realtime_common import (
    DELTA,
    PAUSE_CLIPS,
    TERMINAL,
    SessionLog,
    check_session_events,
    chunks_of,
    pcm16_at,
    recording_with_pauses,
    send_paced,
)
from tests.realtime_schema import check_schema

API_KEY = "ga-test-key"
KEYWORD = "Montreal Forced Aligner"  # the second turn says it; tiny.en misspells it without the keyword
CHUNK_MS = 20
TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("realtime-ga"), env={
        "OASR_SERVICE_MODE": "streaming", "OASR_API_KEY": API_KEY, "OASR_VAD": "silero",
        "OASR_QUANTIZATION": "none"})
    yield srv
    srv.terminate()


def mulaw_recording() -> tuple[bytes, list[tuple[float, float]]]:
    recording, speech = recording_with_pauses()
    return encode_variant(soxr.resample(recording, 16000, 8000), 8000, "mulaw"), speech


async def sdk_ga_session(server: ServerProcess) -> SessionLog:
    import openai

    client = openai.AsyncOpenAI(api_key=API_KEY, websocket_base_url=server.ws_url + "/v1")
    audio, speech = mulaw_recording()
    chunk = 8000 * CHUNK_MS // 1000  # µ-law: one byte per sample
    log = SessionLog()
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.session.update(session={  # type: ignore[arg-type,typeddict-item]
            "type": "transcription",
            "audio": {"input": {
                "format": {"type": "audio/pcmu"},
                "transcription": {"model": "whisper-1", "language": "en", "keywords": [KEYWORD], "delay": "minimal"},
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
            }},
            "include": ["item.input_audio_transcription.logprobs"],
        })

        async def receive() -> None:
            async for event in conn:
                log.add(event.to_dict())
                if len(log.of_type("conversation.item.done")) == len(speech):  # the last event of each turn
                    return

        receiver = asyncio.create_task(receive())

        async def append(data: bytes) -> None:
            await conn.input_audio_buffer.append(audio=base64.b64encode(data).decode())

        await send_paced(append, chunks_of(audio, chunk), CHUNK_MS / 1000)
        await asyncio.wait_for(receiver, TIMEOUT_S)
    return log


@pytest.fixture(scope="module")
def ga_log(server: ServerProcess) -> SessionLog:
    return asyncio.run(sdk_ga_session(server))


def test_sdk_ga_session_events_match_the_ga_schemas(ga_log: SessionLog) -> None:
    check_schema(ga_log.events)
    check_session_events(ga_log.events)
    updated = ga_log.of_type("session.updated")[-1]["session"]
    assert updated["include"] == ["item.input_audio_transcription.logprobs"]
    assert updated["audio"]["input"]["format"]["type"] == "audio/pcmu"
    transcription = updated["audio"]["input"]["transcription"]
    assert (transcription["keywords"], transcription["delay"]) == ([KEYWORD], "minimal")


def test_sdk_ga_session_one_completed_per_turn_with_usage_and_logprobs(ga_log: SessionLog) -> None:
    started = ga_log.of_type("input_audio_buffer.speech_started")
    completed = ga_log.of_type(TERMINAL[0])
    assert len(started) == len(completed) == 2, [e["type"] for e in ga_log.events]
    assert [c["item_id"] for c in completed] == [s["item_id"] for s in started]
    for event in completed:
        assert event["usage"]["type"] == "duration" and event["usage"]["seconds"] > 1.0
        assert event["logprobs"] and b"".join(bytes(lp["bytes"]) for lp in event["logprobs"]).decode().strip() == \
            event["transcript"].strip()
    deltas = ga_log.of_type(DELTA)
    assert {d["item_id"] for d in deltas} == {s["item_id"] for s in started}  # each turn had deltas
    for event in completed:  # the SDK's users join an item's deltas: they make its transcript
        assert "".join(d["delta"] for d in deltas if d["item_id"] == event["item_id"]) == event["transcript"]
    assert all(d["delta"] for d in deltas)  # only text that will not change: never an empty increment
    assert all(d["logprobs"] is not None and all(lp["logprob"] <= 0 for lp in d["logprobs"]) for d in deltas)
    assert any(d["logprobs"] for d in deltas)
    refs = [next(c.text or "" for c in manifest() if c.id == clip) for clip in PAUSE_CLIPS]
    hyps = [c["transcript"] for c in completed]
    assert wer(refs, hyps) <= 30.0, hyps
    from whisper_normalizer.english import EnglishTextNormalizer

    assert "forced aligner" in EnglishTextNormalizer()(hyps[1]), hyps  # the keyword's spelling
    done = ga_log.of_type("conversation.item.done")
    assert [d["item"]["content"][0]["transcript"] for d in done] == hyps


# ---------------------------------------------------------------- client secrets


def connect_with(server: ServerProcess, key: str, **kwargs: Any) -> Any:
    return websockets.connect(server.ws_url + "/v1/realtime?intent=transcription", max_size=None,
                              subprotocols=["realtime", f"openai-insecure-api-key.{key}"], **kwargs)  # type: ignore[list-item]


async def test_client_secret_opens_one_session_with_its_configuration(server: ServerProcess) -> None:
    import openai

    client = openai.AsyncOpenAI(api_key=API_KEY, base_url=server.base_url + "/v1")
    minted = await client.realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": 60},
        session={"type": "transcription", "audio": {"input": {  # type: ignore[typeddict-item]
            "format": {"type": "audio/pcmu"}, "turn_detection": None,
            "transcription": {"language": "en", "keywords": ["OASR"]}}}})
    assert minted.value.startswith("ek_") and minted.session.type == "transcription"
    async with connect_with(server, minted.value) as ws:
        created = json.loads(await ws.recv())
        check_schema([created])
        assert created["session"]["id"] == minted.session.id
        assert created["session"]["audio"]["input"]["format"]["type"] == "audio/pcmu"
        assert created["session"]["audio"]["input"]["transcription"]["keywords"] == ["OASR"]
        mulaw = encode_variant(soxr.resample(load_clip("ps_cards_001"), 16000, 8000), 8000, "mulaw")
        await ws.send(mulaw)
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        while (event := json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))["type"] not in TERMINAL:
            pass
        assert event["type"] == TERMINAL[0] and "club" in event["transcript"].lower(), event
    for key, reason in ((minted.value, b"already used"), ("ek_not-a-secret", b"unknown")):
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with connect_with(server, key):
                pass
        assert refused.value.response.status_code == 401
        assert reason in refused.value.response.body, refused.value.response.body


async def test_beta_transcription_sessions_route_and_bad_requests(server: ServerProcess) -> None:
    import httpx

    auth = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=auth, timeout=30) as http:
        r = await http.post("/v1/realtime/transcription_sessions", json={
            "input_audio_format": "g711_ulaw", "input_audio_transcription": {"model": "whisper-1"},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 300}, "modalities": ["text"]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["input_audio_format"] == "g711_ulaw" and body["client_secret"]["value"].startswith("ek_")
        assert body["turn_detection"]["silence_duration_ms"] == 300
        assert body["client_secret"]["expires_at"] > time.time()
        for payload, param in (
            ({"session": {"type": "realtime"}}, "session.type"),
            ({"expires_after": {"seconds": 5}}, "expires_after.seconds"),
            ({"session": {"type": "transcription", "audio": {"input": {"transcription": {"keywords": ["<x>"]}}}}},
             "session.audio.input.transcription.keywords[0]"),
        ):
            r = await http.post("/v1/realtime/client_secrets", json=payload)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        r = await http.post("/v1/realtime/client_secrets", json={}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401  # minting needs the API key
    async with connect_with(server, body["client_secret"]["value"], additional_headers={"OpenAI-Beta": "realtime=v1"}) as ws:
        created = json.loads(await ws.recv())
        assert created["type"] == "transcription_session.created"
        assert created["session"]["turn_detection"]["silence_duration_ms"] == 300


# ---------------------------------------------------------------- semantic VAD, noise reduction


async def raw_session(server: ServerProcess, update: dict[str, Any], audio: np.ndarray, turns: int) -> list[dict[str, Any]]:
    """Send 16 kHz `audio` as 24 kHz PCM in 100 ms frames after `update`; events until `turns` items ended."""
    events: list[dict[str, Any]] = []
    async with connect_with(server, API_KEY) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "transcription", **update}}))
        for frame in chunks_of(pcm16_at(audio, 24000), 4800):
            await ws.send(frame)
        if update["audio"]["input"].get("turn_detection", {}) is None:
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        while sum(e["type"] in TERMINAL for e in events) < turns:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
            assert events[-1]["type"] != "error", events[-1]
    check_schema(events)
    check_session_events(events)
    return events


async def test_semantic_vad_cuts_the_recording_into_its_two_turns(server: ServerProcess) -> None:
    recording, speech = recording_with_pauses()
    events = await raw_session(server, {"audio": {"input": {
        "turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}}, recording, turns=2)
    started = [e["audio_start_ms"] for e in events if e["type"] == "input_audio_buffer.speech_started"]
    stopped = [e["audio_end_ms"] for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
    assert len(started) == len(stopped) == 2
    assert stopped[0] < speech[1][0] < stopped[1]  # the pause between the clips ended the first turn
    updated = next(e for e in events if e["type"] == "session.updated")
    assert updated["session"]["audio"]["input"]["turn_detection"] == {"type": "semantic_vad", "eagerness": "high"}


async def test_noise_reduction_session_still_transcribes_noisy_speech(server: ServerProcess) -> None:
    clip = load_clip(PAUSE_CLIPS[0])
    noisy = clip + np.random.default_rng(0).standard_normal(clip.size).astype(np.float32) * 0.01
    events = await raw_session(server, {"audio": {"input": {
        "turn_detection": None, "noise_reduction": {"type": "near_field"}}}}, noisy.astype(np.float32), turns=1)
    updated = next(e for e in events if e["type"] == "session.updated")
    assert updated["session"]["audio"]["input"]["noise_reduction"] == {"type": "near_field", "strength": 1.0}
    (done,) = [e for e in events if e["type"] == TERMINAL[0]]
    ref = next(c.text or "" for c in manifest() if c.id == PAUSE_CLIPS[0])
    # Whisper's normalizer reads "a thousand" as "a 1000" and "1000" as "1000": the same words
    # written in numerals would count as an error, so a number's article is dropped on both sides
    ref, said = (re.sub(r"\ba (?=\d)", "", EnglishTextNormalizer()(t)) for t in (ref, done["transcript"]))
    assert wer([ref], [said]) <= 35.0, done["transcript"]
    assert abs(done["audio_end_ms"] - clip.size / 16) <= 30  # denoising delays audio, never drops it


# ---------------------------------------------------------------- recorded integrations

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "clients"
REPLAY_CLIP = "libri_61-70968-0000"


async def replay(server: ServerProcess, fixture: str) -> tuple[dict[str, Any], SessionLog]:
    """Replay an integration's recorded connection (its query string, its session.update, then
    its appends and commit) with a real clip's audio in place of the recorded silence; the log
    of what the server answered, up to the item's `completed`."""
    recorded = json.loads((FIXTURES / fixture).read_text())
    (connection,) = recorded["cases"]["defaults"]["connections"]
    events = connection["events"]
    update = next(e for e in events if e["type"] == "session.update")
    url = f"{server.ws_url}{connection['path']}?{urlencode([tuple(pair) for pair in connection['query']])}"
    fmt = update["session"]["audio"]["input"]["format"]
    pcm = pcm16_at(np.concatenate([load_clip(REPLAY_CLIP), np.zeros(24000, np.float32)]), fmt["rate"])
    log = SessionLog()
    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {API_KEY}"},
                                  max_size=None) as ws:
        await ws.send(json.dumps(update))
        for chunk in chunks_of(pcm, fmt["rate"] * 2 // 10):  # 100 ms appends, as fast as the socket takes them
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}))
        if any(e["type"] == "input_audio_buffer.commit" for e in events):
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))

        async def receive() -> None:
            async for message in ws:
                log.add(json.loads(message))
                if log.of_type(TERMINAL[0]) or log.of_type("error"):
                    return

        await asyncio.wait_for(receive(), TIMEOUT_S)
    return recorded, log


@pytest.mark.parametrize("fixture", ["livekit_plugins_openai.json", "pipecat_openai.json"])
async def test_recorded_openai_realtime_integrations_are_served(server: ServerProcess, fixture: str) -> None:
    recorded, log = await replay(server, fixture)
    assert not log.of_type("error"), (recorded["library"], log.of_type("error"))
    (completed,) = log.of_type(TERMINAL[0])
    reference = next(c.text or "" for c in manifest() if c.id == REPLAY_CLIP)
    assert wer([reference], [completed["transcript"]]) <= 15.0, completed["transcript"]
    joined = "".join(d["delta"] for d in log.of_type(DELTA) if d["item_id"] == completed["item_id"])
    assert joined == completed["transcript"]  # what the integration shows, joined, is the final
