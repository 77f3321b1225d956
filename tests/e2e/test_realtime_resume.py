"""Resumable /v1/realtime sessions end to end (issue 15 must-show 3), on a default (offline-mode)
server with a 4 s grace period: a turn's transcript is one decode of its audio there, so a
resumed session must give exactly the events of an uninterrupted one.

- The client's socket is cut (no close handshake) mid-turn, between turns and while the final
  transcript is being computed; `oasr/realtime.py` reconnects with the resume token
  and the last event id, re-sends what the server does not hold, and every event arrives
  exactly once, identical to an uninterrupted run.
- A wrong token is refused (4401); a session not resumed within the grace is ended, its engine
  request and permit freed (`oasr_engine_running` 0), and its token then refused (4408).
- `oasr stream` through a proxy that cuts the connection once prints the same transcript.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from oasr.realtime import ResumingRealtimeClient
from tests.conftest import load_clip, manifest
from tests.e2e.conftest import REPO, ServerProcess, free_port, start_server
from tests.e2e.test_grpc import metric_value
from tests.e2e.test_realtime_common import COMMITTED, TERMINAL, check_session_events, chunks_of, pcm16_at
from tests.realtime_schema import check_schema

GRACE_S = 4
TURNS = ("mfa_thoughts", "ps_goforward")
CHUNK_BYTES = 960  # 20 ms of 24 kHz PCM16
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("resume"), env={"OASR_REALTIME_RESUME_GRACE_SECS": str(GRACE_S)})
    yield srv
    srv.terminate()


def url(server: ServerProcess) -> str:
    return server.ws_url + "/v1/realtime?intent=transcription"


class Session:
    """A resuming client and every event it hands out, with a way to wait for one."""

    def __init__(self, server: ServerProcess) -> None:
        self.client = ResumingRealtimeClient(url(server), rate=24000)
        self.events: list[dict[str, Any]] = []
        self._arrived = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.client.connect()
        self._reader = asyncio.ensure_future(self._collect())
        await self.client.send_event({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None,
                      "transcription": {"language": "en"}}}}})
        await self.until(lambda: self.count("session.updated") == 1)

    async def _collect(self) -> None:
        async for event in self.client.events():
            self.events.append(event)
            self._arrived.set()

    def count(self, kind: str) -> int:
        return sum(e["type"] == kind for e in self.events)

    async def until(self, done: Any) -> None:
        while True:  # cleared before each look, so an event arriving meanwhile is not missed
            self._arrived.clear()
            if done():
                return
            await asyncio.wait_for(self._arrived.wait(), TIMEOUT_S)

    async def drop(self) -> None:
        """Cut the socket and wait until the session is resumed on a new one."""
        resumed = self.count("session.resumed")
        self.client.drop()
        await self.until(lambda: self.count("session.resumed") > resumed)

    async def close(self) -> None:
        await self.client.close()
        if self._reader is not None:
            self._reader.cancel()


async def run(server: ServerProcess, drops: frozenset[str]) -> list[dict[str, Any]]:
    session = Session(server)
    await session.start()
    for turn, clip in enumerate(TURNS):
        if turn == 1 and "between turns" in drops:
            await session.drop()
        chunks = chunks_of(pcm16_at(load_clip(clip), 24000), CHUNK_BYTES)
        for i, chunk in enumerate(chunks):
            if turn == 0 and i == len(chunks) // 2 and "mid-turn" in drops:
                session.client.drop()  # the next chunks go out while the client reconnects
            await session.client.send_audio(chunk)
        await session.client.commit()
        await session.until(lambda t=turn: session.count(COMMITTED) > t)
        if turn == 1 and "during the final" in drops:
            await session.drop()
        await session.until(lambda t=turn: session.count("conversation.item.done") > t)
    await session.close()
    return session.events


def comparable(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must match between runs: each event's type, item (by order) and content, without ids,
    server timings and the connection-level `session.resumed`."""
    items: dict[str, int] = {}
    out = []
    for e in events:
        if e["type"] == "session.resumed":
            continue
        item = e.get("item_id") or (e.get("item") or {}).get("id")
        index = items.setdefault(item, len(items)) if item else None
        transcript = e.get("transcript", ((e.get("item") or {}).get("content") or [{}])[0].get("transcript"))
        out.append((e["type"], index, transcript, e.get("audio_end_ms"), json.dumps(e.get("usage"))))
    return out


@pytest.fixture(scope="module")
def runs(server: ServerProcess) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    async def both() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        plain = await run(server, frozenset())
        cut = await run(server, frozenset({"mid-turn", "between turns", "during the final"}))
        return plain, cut

    return asyncio.run(both())


def test_a_session_cut_three_times_gets_every_event_exactly_once(
        runs: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    plain, cut = runs
    assert sum(e["type"] == "session.resumed" for e in cut) == 3
    check_session_events(cut)  # unique event ids, one terminal event per committed item
    check_schema(cut)
    assert comparable(cut) == comparable(plain)
    transcripts = [e["transcript"] for e in cut if e["type"] == TERMINAL[0]]
    assert len(transcripts) == len(TURNS) and all(transcripts), transcripts
    resumed = [e for e in cut if e["type"] == "session.resumed"]
    assert resumed[1]["commits_received"] == 1  # between turns: the first commit was taken
    created = next(e for e in cut if e["type"] == "session.created")
    assert created["resume"]["grace_seconds"] == GRACE_S and all(
        r["resume"]["token"] == created["resume"]["token"] for r in resumed)


async def closed_with(address: str) -> tuple[int | None, str]:
    async with websockets.connect(address) as ws:
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            await asyncio.wait_for(ws.recv(), TIMEOUT_S)
    rcvd = closed.value.rcvd
    return (rcvd.code, rcvd.reason) if rcvd else (None, "")


async def test_wrong_token_and_expired_grace_are_refused_and_free_the_stream(server: ServerProcess) -> None:
    session = Session(server)
    await session.start()
    for chunk in chunks_of(pcm16_at(load_clip(TURNS[0]), 24000), CHUNK_BYTES)[:50]:  # a turn left open
        await session.client.send_audio(chunk)
    await session.client.send_event({"type": "input_audio_buffer.clear", "event_id": "sync"})
    await session.until(lambda: session.count("input_audio_buffer.cleared") == 1)
    for chunk in chunks_of(pcm16_at(load_clip(TURNS[0]), 24000), CHUNK_BYTES)[:50]:
        await session.client.send_audio(chunk)
    token, last = session.client.resume["token"], session.client.last_event_id  # type: ignore[index]
    session.client.resume = None  # no reconnecting: this test resumes by hand
    session.client.drop()
    assert await closed_with(f"{url(server)}&resume_token=rst_wrong&last_event_id={last}") == (
        4401, "unknown resume token")
    code, reason = await closed_with(f"{url(server)}&resume_token={token}&last_event_id=event_unknown")
    assert code == 4400 and "last_event_id" in reason  # the session is still parked: only the request was bad
    deadline = time.monotonic() + GRACE_S + 60
    while (metric_value(server, "oasr_engine_running"), httpx.get(f"{server.base_url}/readyz").json()["inflight"]) != (0, 0):
        assert time.monotonic() < deadline, "the parked session was never freed"
        await asyncio.sleep(0.2)
    code, reason = await closed_with(f"{url(server)}&resume_token={token}&last_event_id={last}")
    assert code == 4408 and "grace" in reason
    await session.close()


# ---------------------------------------------------------------- oasr stream through a flaky proxy


@contextlib.asynccontextmanager
async def cutting_proxy(target_port: int, cut_after: int) -> Any:
    """A TCP proxy to the server that aborts its first connection once `cut_after` bytes went
    upstream; later connections pass through. Yields its port."""
    cuts = 0

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counted: bool,
                   both: list[asyncio.StreamWriter]) -> None:
        nonlocal cuts
        sent = 0
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                sent += len(data)
                if counted and cuts == 0 and sent >= cut_after:
                    cuts += 1
                    for w in both:
                        w.transport.abort()
                    return
        writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        both = [client_w, server_w]
        await asyncio.gather(pipe(client_r, server_w, True, both), pipe(server_r, client_w, False, both))

    port = free_port()
    proxy = await asyncio.start_server(handle, "127.0.0.1", port)
    try:
        yield port
    finally:
        proxy.close()


async def oasr_stream(port: int, path: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "-v", "stream", "--url", f"http://127.0.0.1:{port}", "--speed", "4", path,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_oasr_stream_resumes_after_the_connection_is_cut(server: ServerProcess) -> None:
    clip = next(c for c in manifest() if c.id == TURNS[1])
    audio_bytes = len(pcm16_at(load_clip(clip.id), 24000))
    code, plain, _ = await oasr_stream(server.port, str(clip.path))
    assert code == 0
    async with cutting_proxy(server.port, cut_after=audio_bytes // 2) as port:
        code, cut, log = await oasr_stream(port, str(clip.path))
    assert code == 0, log
    assert re.search(r"session resumed at \d+ ms of audio", log), log
    assert cut.split("\r")[-1] == plain.split("\r")[-1] and plain.strip(), (plain, cut)
