"""Fault (e) of issue 35: `kill -9` of the server during a live /v1/realtime session that holds a
resume token. After the restart the resuming client (oasr/realtime.py, what `oasr
stream` uses) gets a clear close code at once, 4408 "the server restarted", instead of hanging or
being told that its token is wrong. A real server on a fake-family checkpoint (the session layer
is under test, not the model), killed and restarted on the same port."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import websockets

from engine.models.fake import write_checkpoint
from oasr.realtime import ResumeRefused, ResumingRealtimeClient
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_realtime_common import TERMINAL

RATE = 24000  # Hz, the realtime API's PCM rate
TIMEOUT_S = 60.0


def tone_pcm(seconds: float) -> bytes:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes()


def url(server: ServerProcess, query: str = "") -> str:
    return f"{server.ws_url}/v1/realtime?intent=transcription{query}"


async def next_event(queue: asyncio.Queue[Any], kind: str) -> dict[str, Any]:
    while True:
        item = await asyncio.wait_for(queue.get(), TIMEOUT_S)
        if isinstance(item, BaseException):
            raise item
        if item["type"] == kind:
            return dict(item)


@pytest.mark.asyncio
async def test_after_kill_9_and_restart_a_resuming_client_is_told_its_session_ended(tmp_path: Path) -> None:
    ckpt = write_checkpoint(str(tmp_path / "ckpt"))
    env = {"OASR_CKPT_DIR": ckpt, "OASR_REALTIME_RESUME_GRACE_SECS": "30"}
    first = start_server(tmp_path, env)
    second: ServerProcess | None = None
    client = ResumingRealtimeClient(url(first), rate=RATE)
    events: asyncio.Queue[Any] = asyncio.Queue()

    async def collect() -> None:
        try:
            async for event in client.events():
                events.put_nowait(event)
        except BaseException as exc:
            events.put_nowait(exc)

    reader = asyncio.ensure_future(collect())
    try:
        await client.connect()
        await client.send_event({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": RATE}, "turn_detection": None}}}})
        created = await next_event(events, "session.created")
        token = created["resume"]["token"]
        await client.send_audio(tone_pcm(0.5))
        await client.commit()
        done = await next_event(events, TERMINAL[0])
        assert done["transcript"] == "loud loud loud loud loud"
        await client.send_audio(tone_pcm(0.3))  # a turn under way when the server dies

        # Kill and restart while this event loop is blocked: the client's first reconnect meets
        # the restarted server (one whose retries span a restart sees the same).
        first.proc.kill()
        first.proc.wait()
        second = start_server(tmp_path, env, port=first.port)

        with pytest.raises(ResumeRefused) as refused:
            while True:
                await next_event(events, "never sent")
        assert "4408" in str(refused.value) and "server restarted" in str(refused.value), refused.value
        assert client.reconnects == 0

        # the same close for a bare WebSocket client resuming by hand
        async with websockets.connect(url(second, f"&resume_token={token}&last_event_id=x")) as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4408
        # a token this server never could have issued is still just unknown
        async with websockets.connect(url(second, "&resume_token=rst_forged&last_event_id=x")) as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), TIMEOUT_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
    finally:
        reader.cancel()
        with contextlib.suppress(Exception):
            await client.close()
        first.terminate()
        if second is not None:
            second.terminate()
