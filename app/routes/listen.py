"""GET /v1/listen: Deepgram's live transcription protocol over a WebSocket.

Admission happens before the handshake (one inflight permit per session; without a free one
the upgrade is answered with HTTP 503). API keys are checked by the middleware (Deepgram's
`Authorization: Token <key>` included). Bad query parameters are answered after the
handshake, the way Deepgram's clients read them: an `Error` message with the whole reason,
then a close frame (1008) carrying it. After that the route only moves messages to
`ListenSession`. A session ends with CloseStream (1000), after `--stream-idle-timeout-secs`
without messages while nothing is being transcribed (1011, Deepgram's NET-0001), on client
close, or at shutdown (1001); its `finally` aborts every engine request it still has open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from importlib import metadata
from typing import Any

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse

from app.deepgram import messages as msg
from app.deepgram.params import QueryError, parse_params
from app.deepgram.session import API, CLOSE_INTERNAL, CLOSE_POLICY, ListenSession, close_reason
from app.engine_service import EngineService
from app.live import VadModelCache
from app.realtime.sender import EventSender
from app.settings import Settings

logger = logging.getLogger(__name__)
router = APIRouter(tags=["deepgram"])

SUBPROTOCOLS = ("token", "bearer")
"""Browsers pass the key as `new WebSocket(url, ["token", KEY])`; the server echoes the scheme."""


class ListenRegistry:
    """Live /v1/listen sessions of one app, closed with 1001 when the server drains."""

    def __init__(self) -> None:
        self.sessions: set[ListenSession] = set()

    @classmethod
    def of(cls, state: Any) -> ListenRegistry:
        registry: ListenRegistry | None = getattr(state, "listen_sessions", None)
        if registry is None:
            registry = cls()
            state.listen_sessions = registry
            hooks = getattr(state, "drain_hooks", None)
            if hooks is not None:
                hooks.append(registry.drain)
        return registry

    async def drain(self) -> None:
        await asyncio.gather(*(s.drain() for s in list(self.sessions)), return_exceptions=True)


def model_identity(service: EngineService, settings: Settings) -> msg.ModelIdentity:
    info = service.engine.info()
    try:
        version = metadata.version("oasr")
    except metadata.PackageNotFoundError:
        version = "0.0.0"
    return msg.ModelIdentity(name=settings.served_model_name or str(info.get("model", "unknown")),
                             version=version, arch=str(info.get("family", "unknown")))


@router.websocket("/v1/listen")
async def listen(websocket: WebSocket) -> None:
    state = websocket.app.state
    service: EngineService = state.service
    if not service.try_acquire():
        message = "server is shutting down" if service.draining else "server is at capacity (--max-inflight); retry later"
        try:
            await websocket.send_denial_response(JSONResponse({"err_code": "UNAVAILABLE", "err_msg": message},
                                                              status_code=503))
        except RuntimeError:  # the ASGI server lacks the denial extension: a bare close (HTTP 403)
            await websocket.close(1013, message)
        return
    try:
        await _serve(websocket, state.settings, service, ListenRegistry.of(state), VadModelCache.of(state))
    finally:
        service.release()


async def _serve(websocket: WebSocket, settings: Settings, service: EngineService, registry: ListenRegistry,
                 vad_models: VadModelCache) -> None:
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=next((p for p in SUBPROTOCOLS if p in offered), None))
    sender = EventSender(websocket)
    try:
        params = parse_params(websocket.query_params.multi_items(), settings.vad_silence_duration_ms)
        session = ListenSession(sender, service, params, vad=await vad_models.batcher(), settings=settings,
                                model=model_identity(service, settings))
    except QueryError as exc:
        logger.info("listen: refused %s: %s", websocket.url.query, exc)
        await sender.send(msg.error(str(exc), "InvalidQuery"))
        await sender.close(CLOSE_POLICY, close_reason(f"INVALID_QUERY: {exc}"))
        return
    metrics = service.metrics
    registry.sessions.add(session)
    metrics.stream_sessions_active.labels(api=API).inc()
    logger.info("listen %s opened: %s", session.id, websocket.url.query)
    session.start()
    try:
        await _receive_loop(websocket, session, settings)
    finally:
        session.abort_all()
        registry.sessions.discard(session)
        metrics.stream_sessions_active.labels(api=API).dec()
        wall = time.monotonic() - session.started
        if session.audio_seconds > 0 and wall > 0:
            metrics.stream_realtime_factor.observe(session.audio_seconds / wall)
        logger.info("listen %s closed after %.1f s (%.1f s of %s audio)", session.id, wall, session.audio_seconds,
                    session.audio.format or "no")


async def _receive_loop(websocket: WebSocket, session: ListenSession, settings: Settings) -> None:
    max_bytes = settings.max_stream_frame_kib * 1024
    idle = settings.stream_idle_timeout_secs
    while not session.sender.closed:
        try:
            message = await asyncio.wait_for(websocket.receive(), timeout=idle)
        except asyncio.TimeoutError:
            if session.busy:
                continue  # transcription still in progress counts as activity
            await session.fail(CLOSE_INTERNAL, f"NET-0001: no audio or KeepAlive for {idle:g} s "
                                               "(--stream-idle-timeout-secs)", "Timeout")
            return
        if message["type"] == "websocket.disconnect":
            return
        text: str | None = message.get("text")
        data: bytes | None = message.get("bytes")
        size = len(data) if data is not None else len(text.encode()) if text is not None else 0
        if size > max_bytes:
            await session.fail(1009, f"a message of {size} bytes exceeds the {settings.max_stream_frame_kib} KiB "
                                     "limit (--max-stream-frame-kib); send audio in smaller chunks", "MessageTooBig")
            return
        if text is not None:
            await session.handle_text(text)
        elif data is not None:
            await session.handle_binary(data)
