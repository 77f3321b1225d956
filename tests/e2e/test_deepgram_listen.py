"""GET /v1/listen end to end: the official `deepgram-sdk` live client against a streaming-mode
server with API keys on (issue 15 must-show 4), and raw `websockets` clients for what the SDK
hides (close frames, the browser's ["token", key] subprotocol, WebM from MediaRecorder).

- A dev clip streamed at real time: interim and final Results with word times, one final per
  segment after its interims, transcripts as good as the file API's, Metadata last.
- A recording with a pause, as 8 kHz mu-law: SpeechStarted per utterance, speech_final at each
  endpoint, UtteranceEnd between the utterances.
- Bad query parameters: an Error message, then a close frame (1008) whose reason names them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soxr
import websockets
from deepgram import AsyncDeepgramClient, DeepgramClientEnvironment
from deepgram.core.api_error import ApiError as DeepgramApiError
from deepgram.listen.v1.types.listen_v1results import ListenV1Results

from tests.audio_variants import encode_variant
from tests.conftest import load_clip, manifest, wer
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_realtime_common import PAUSE_CLIPS, chunks_of, pcm16_at, recording_with_pauses, send_paced

API_KEY = "dg-test-key"
IDLE_S = 3.0
CLIP = "libri_2412-153948-0000"  # 11.7 s, two sentences
SHORT_CLIP = "ps_cards_005"  # 3.5 s
CHUNK_S = 0.1
WER_SLACK_WORDS = 2
"""Live may get two more word errors on the clip than the file API's transcript of the same audio.
On a loaded machine the live path sometimes splits "nor" after "antecedents," into "No, or" (two
errors of 36); /v1/realtime sessions without server VAD show the same split
(test_realtime_ws.py::test_sdk_session_transcribes_like_offline), so it comes from the live Whisper
passes, not from this socket's segmenting: a known live-path defect, not fixed yet."""
MAX_WER = 25.0  # percent: tiny.en on 8 kHz G.711 or Opus writes "force weiner" for "forced aligner"
WORD_SLACK_S = 0.05
VAD_TOLERANCE_MS = 200
TIMEOUT_S = 180.0


def start_listen_server(tmp_dir: Path) -> ServerProcess:
    return start_server(tmp_dir, env={
        "OASR_SERVICE_MODE": "streaming", "OASR_API_KEY": API_KEY, "OASR_VAD": "silero",
        "OASR_STREAM_IDLE_TIMEOUT_SECS": str(IDLE_S),
    })


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_listen_server(tmp_path_factory.mktemp("listen"))
    yield srv
    srv.terminate()


def environment(server: ServerProcess) -> DeepgramClientEnvironment:
    """How the SDK is pointed at this server instead of api.deepgram.com."""
    return DeepgramClientEnvironment(base=server.base_url, production=server.ws_url, agent=server.ws_url,
                                     agent_rest=server.base_url)


@dataclass
class Listened:
    messages: list[dict[str, Any]] = field(default_factory=list)
    sent: bytes = b""

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]

    def finals(self) -> list[dict[str, Any]]:
        return [m for m in self.of("Results") if m["is_final"]]

    def transcript(self) -> str:
        return " ".join(m["channel"]["alternatives"][0]["transcript"] for m in self.finals()).strip()


async def sdk_listen(server: ServerProcess, audio: bytes, chunk_bytes: int, *, hold_after: int | None = None,
                     **params: Any) -> Listened:
    """Stream `audio` at real time through the SDK's live client, then CloseStream; collect
    every message the SDK parsed (each must be one of its own types). With `hold_after`, the
    client stops after that many chunks until an interim result has come (sending KeepAlive
    meanwhile), so an interim is certain however slow the loaded machine's engine runs."""
    client = AsyncDeepgramClient(api_key=API_KEY, environment=environment(server))
    out = Listened(sent=audio)
    interim = asyncio.Event()
    chunks = chunks_of(audio, chunk_bytes)
    hold = len(chunks) if hold_after is None else hold_after
    async with client.listen.v1.connect(model="nova-3", **params) as conn:

        async def send() -> None:
            await send_paced(conn.send_media, chunks[:hold], CHUNK_S)
            if hold_after is not None:
                while not interim.is_set():
                    await conn.send_keep_alive()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(interim.wait(), 1.0)
            await send_paced(conn.send_media, chunks[hold:], CHUNK_S)
            await conn.send_close_stream()

        sender = asyncio.create_task(send())
        async for message in conn:
            assert not isinstance(message, dict | bytes), message  # the SDK knew every message type
            out.messages.append(message.model_dump(mode="json", exclude_unset=True))
            if message.type == "Results" and not message.is_final:
                interim.set()
        await sender
    return out


def offline_transcript(server: ServerProcess, audio: np.ndarray) -> str:
    r = httpx.post(f"{server.base_url}/v1/audio/transcriptions", headers={"Authorization": f"Bearer {API_KEY}"},
                   files={"file": ("a.wav", encode_variant(audio, 16000, "wav"))}, timeout=TIMEOUT_S)
    r.raise_for_status()
    return str(r.json()["text"])


def reference(clip_id: str) -> str:
    text = next(c.text for c in manifest() if c.id == clip_id)
    assert text is not None
    return text


def check_results(listened: Listened) -> None:
    """Deepgram's order: per segment (same `start`) interims, then exactly one final; segments
    in stream order; final words in time order inside their segment's audio."""
    results = listened.of("Results")
    starts = [m["start"] for m in results]
    assert starts == sorted(starts), starts
    for start in dict.fromkeys(starts):
        segment = [m for m in results if m["start"] == start]
        assert [m["is_final"] for m in segment] == [False] * (len(segment) - 1) + [True], segment
    for final in listened.finals():
        alt = final["channel"]["alternatives"][0]
        words = alt["words"]
        assert bool(words) == bool(alt["transcript"]), final
        assert 0.0 <= alt["confidence"] <= 1.0
        begin, end = final["start"] - WORD_SLACK_S, final["start"] + final["duration"] + WORD_SLACK_S
        for w in words:
            assert begin <= w["start"] <= w["end"] <= end, (w, final["start"], final["duration"])
        assert [w["start"] for w in words] == sorted(w["start"] for w in words)


# ---------------------------------------------------------------- must-show 4: the SDK live client


@pytest.fixture(scope="module")
def sessions(server: ServerProcess) -> dict[str, Listened]:
    """The SDK sessions of this module, run concurrently (both at real time)."""
    clip = pcm16_at(load_clip(CLIP), 16000)
    pauses, _ = recording_with_pauses()
    mulaw = encode_variant(soxr.resample(pauses, 16000, 8000, quality="HQ"), 8000, "mulaw")  # telephony's 8 kHz G.711

    async def run() -> list[Listened]:
        return await asyncio.gather(
            sdk_listen(server, clip, 3200, hold_after=30, encoding="linear16", sample_rate=16000, interim_results="true",
                       punctuate="true"),
            sdk_listen(server, mulaw, 800, encoding="mulaw", sample_rate=8000, interim_results="true",
                       vad_events="true", utterance_end_ms=1000, endpointing=300, language="en-US"),
        )

    clip_session, pause_session = asyncio.run(run())
    return {"clip": clip_session, "pauses": pause_session}


def test_sdk_transcribes_a_clip_with_interim_and_final_results_and_word_times(
        server: ServerProcess, sessions: dict[str, Listened]) -> None:
    listened = sessions["clip"]
    check_results(listened)
    results = listened.of("Results")
    assert any(not m["is_final"] for m in results), "no interim results"
    assert listened.finals() and all(w["punctuated_word"] for f in listened.finals()
                                     for w in f["channel"]["alternatives"][0]["words"])
    live = listened.transcript()
    offline = offline_transcript(server, load_clip(CLIP))
    slack = 100.0 * WER_SLACK_WORDS / len(reference(CLIP).split())
    assert wer([reference(CLIP)], [live]) <= wer([reference(CLIP)], [offline]) + slack, (live, offline)
    meta = listened.messages[-1]
    assert meta["type"] == "Metadata" and meta["channels"] == 1
    assert meta["sha256"] == hashlib.sha256(listened.sent).hexdigest()
    assert abs(meta["duration"] - len(listened.sent) / 2 / 16000) < 0.01
    assert {m["metadata"]["request_id"] for m in results} == {meta["request_id"]}
    assert [ListenV1Results.model_validate(m) for m in results]  # what the SDK handed out parses back


def test_sdk_mulaw_with_vad_events_endpoints_and_utterance_end(sessions: dict[str, Listened]) -> None:
    listened = sessions["pauses"]
    check_results(listened)
    _, expected = recording_with_pauses()
    started = [m["timestamp"] * 1000 for m in listened.of("SpeechStarted")]
    assert len(started) == len(expected)
    assert all(abs(s - on) < VAD_TOLERANCE_MS for s, (on, _) in zip(started, expected)), (started, expected)
    finals = [m for m in listened.finals() if m["channel"]["alternatives"][0]["transcript"]]
    assert len(finals) == 2 and all(f["speech_final"] for f in finals), finals
    kinds = [m["type"] if m["type"] != "Results" or not m["is_final"] else "final" for m in listened.messages]
    first_final = kinds.index("final")
    assert "UtteranceEnd" in kinds[first_final:kinds.index("final", first_final + 1)], kinds
    end = listened.of("UtteranceEnd")[0]
    assert end["last_word_end"] == finals[0]["channel"]["alternatives"][0]["words"][-1]["end"]
    refs = [reference(c) for c in PAUSE_CLIPS]
    assert wer(refs, [f["channel"]["alternatives"][0]["transcript"] for f in finals]) < MAX_WER


def test_sdk_bad_query_parameters_close_with_a_reason(server: ServerProcess) -> None:
    async def run() -> tuple[list[Any], websockets.ConnectionClosed]:
        client = AsyncDeepgramClient(api_key=API_KEY, environment=environment(server))
        received = []
        async with client.listen.v1.connect(model="nova-3", encoding="linear16") as conn:  # no sample_rate
            with pytest.raises(websockets.ConnectionClosedError) as closed:
                async for message in conn:
                    received.append(message)
        return received, closed.value

    received, closed = asyncio.run(run())
    assert closed.rcvd is not None and closed.rcvd.code == 1008
    assert closed.rcvd.reason == "INVALID_QUERY: sample_rate is required with encoding=linear16 (headerless audio " \
                                 "carries no rate)"
    (error,) = received
    assert error.type == "Error" and "sample_rate is required" in error.description


def test_sdk_without_the_key_is_refused(server: ServerProcess) -> None:
    async def run() -> None:
        client = AsyncDeepgramClient(api_key="wrong", environment=environment(server))
        async with client.listen.v1.connect(model="nova-3"):
            pass

    with pytest.raises(DeepgramApiError) as refused:
        asyncio.run(run())
    assert refused.value.status_code == 403


# ---------------------------------------------------------------- raw clients


def connect(server: ServerProcess, query: str, **kwargs: Any) -> Any:
    kwargs.setdefault("additional_headers", {"Authorization": f"Token {API_KEY}"})
    return websockets.connect(f"{server.ws_url}/v1/listen?{query}", max_size=None, **kwargs)


async def until_closed(ws: Any) -> tuple[list[dict[str, Any]], int | None, str]:
    messages = []
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            messages.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
    return messages, ws.close_code, ws.close_reason


@pytest.mark.parametrize(("query", "reason"), [
    ("encoding=mp3", "INVALID_QUERY: unknown encoding 'mp3'"),
    ("encoding=linear16&sample_rate=1000", "INVALID_QUERY: sample_rate must be from 4000 to 384000, got 1000"),
    ("interim_results=maybe", "INVALID_QUERY: interim_results must be true or false, got 'maybe'"),
    ("utterance_end_ms=1000", "INVALID_QUERY: utterance_end_ms needs interim_results=true (as on Deepgram)"),
    ("diarize=true", "INVALID_QUERY: diarize: speaker diarization is not supported by this server"),
    ("interim=true", "INVALID_QUERY: unknown query parameter 'interim'"),
    ("language=fr", "INVALID_QUERY: language 'fr' is not supported by the whisper model 'tiny.en': it is English-only"),
])
def test_bad_query_parameters_get_an_error_and_a_close_frame(server: ServerProcess, query: str, reason: str) -> None:
    async def run() -> tuple[list[dict[str, Any]], int | None, str]:
        async with connect(server, query) as ws:
            return await until_closed(ws)

    messages, code, got = asyncio.run(run())
    assert code == 1008 and got.startswith(reason), got
    assert [m["type"] for m in messages] == ["Error"] and messages[0]["variant"] == "InvalidQuery"


def test_browser_webm_with_the_token_subprotocol_finalize_and_keepalive(server: ServerProcess) -> None:
    """MediaRecorder's WebM/Opus, no encoding given, the key as the subprotocol after 'token'."""
    audio = load_clip(SHORT_CLIP)
    webm = encode_variant(audio, 16000, "webm_opus")

    async def run() -> tuple[list[dict[str, Any]], int | None, str | None]:
        async with connect(server, "punctuate=true", additional_headers={},
                           subprotocols=["token", API_KEY]) as ws:  # type: ignore[list-item]
            for chunk in chunks_of(webm, 2000):
                await ws.send(chunk)
            await ws.send(json.dumps({"type": "KeepAlive"}))
            await ws.send(json.dumps({"type": "Finalize"}))
            await ws.send(json.dumps({"type": "CloseStream"}))
            messages, code, _ = await until_closed(ws)
            return messages, code, ws.subprotocol

    messages, code, subprotocol = asyncio.run(run())
    assert subprotocol == "token" and code == 1000
    listened = Listened(messages)
    check_results(listened)
    assert sum(1 for m in listened.finals() if m["from_finalize"]) == 1, listened.finals()
    assert wer([reference(SHORT_CLIP)], [listened.transcript()]) < MAX_WER, listened.transcript()
    assert messages[-1]["type"] == "Metadata" and abs(messages[-1]["duration"] - audio.size / 16000) < 0.05


def test_idle_session_closes_with_net_0001_and_metrics_count_sessions(server: ServerProcess) -> None:
    async def run() -> tuple[list[dict[str, Any]], int | None, str]:
        async with connect(server, "encoding=linear16&sample_rate=16000") as ws:
            await ws.send(np.zeros(1600, dtype="<i2").tobytes())
            return await until_closed(ws)

    messages, code, reason = asyncio.run(run())
    assert code == 1011 and reason.startswith("NET-0001: no audio or KeepAlive for 3 s")
    assert messages[-1]["variant"] == "Timeout"
    text = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10).text
    assert 'oasr_stream_sessions_active{api="deepgram"} 0.0' in text
    assert 'oasr_audio_seconds_total{api="deepgram",mode="streaming"}' in text


def test_offline_server_sends_finals_only(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The default service mode: each segment is decoded once it ends; no interims, same shapes."""
    srv = start_server(tmp_path_factory.mktemp("listen-offline"))
    try:
        audio = np.concatenate([load_clip(SHORT_CLIP), np.zeros(16000, dtype=np.float32)])
        listened = asyncio.run(sdk_listen(srv, pcm16_at(audio, 16000), 6400, encoding="linear16",
                                          sample_rate=16000, interim_results="true"))
    finally:
        srv.terminate()
    check_results(listened)
    assert listened.finals() and all(m["is_final"] for m in listened.of("Results"))
    assert all(f["channel"]["alternatives"][0]["words"] for f in listened.finals())
    assert wer([reference(SHORT_CLIP)], [listened.transcript()]) < MAX_WER, listened.transcript()
    assert listened.messages[-1]["type"] == "Metadata"


async def test_shutdown_closes_listen_sessions_with_1001(tmp_path: Path) -> None:
    """SIGTERM stops a server of its own, so no other test depends on running before this one."""
    server = await asyncio.get_running_loop().run_in_executor(None, start_listen_server, tmp_path)
    try:
        async with connect(server, "encoding=linear16&sample_rate=16000") as ws:
            await ws.send(pcm16_at(load_clip(SHORT_CLIP), 16000))
            exit_code = asyncio.get_running_loop().run_in_executor(None, server.terminate)
            messages, code, reason = await until_closed(ws)
    finally:
        server.terminate()  # a no-op once the test's own SIGTERM has stopped it
    assert code == 1001 and reason == "server is shutting down"
    assert messages[-1]["type"] == "Error" and messages[-1]["variant"] == "ServerShutdown"
    assert await exit_code == 0
