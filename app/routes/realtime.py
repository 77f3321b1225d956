"""GET /v1/realtime: OpenAI's realtime transcription protocol over a WebSocket.

Admission happens before the handshake: each session holds one inflight permit for its
whole life, and without a free one the upgrade is answered with HTTP 503. After accept the
route only moves messages: frames go to `RealtimeSession`, which owns the protocol. A
session ends on client close, after `--stream-idle-timeout-secs` without client messages
and without transcription in progress, or at shutdown (close 1001); its `finally` aborts
every engine request it still has open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse

from app.engine_service import EngineService
from app.errors import ApiError
from app.live.vad import VadModelCache
from app.metrics import Metrics
from app.realtime.config import VadSettings
from app.realtime.events import error_event
from app.realtime.sender import EventSender
from app.realtime.session import API, RealtimeSession
from app.settings import Settings

logger = logging.getLogger(__name__)
router = APIRouter(tags=["realtime"])

SUBPROTOCOL = "realtime"
"""Browsers pass the API key as a subprotocol next to this one; the server must echo one back."""


class SessionRegistry:
    """Live sessions of one app, and their shutdown drain."""

    def __init__(self) -> None:
        self.sessions: set[RealtimeSession] = set()

    @classmethod
    def of(cls, state: Any) -> SessionRegistry:
        registry: SessionRegistry | None = getattr(state, "realtime_sessions", None)
        if registry is None:
            registry = cls()
            state.realtime_sessions = registry
            hooks = getattr(state, "drain_hooks", None)
            if hooks is not None:
                hooks.append(registry.drain)
        return registry

    async def drain(self) -> None:
        """Shutdown: close every live session with 1001 right away (the ASGI server closes
        WebSockets itself moments later), failing items still being transcribed."""
        sessions = list(self.sessions)
        if sessions:
            logger.info("closing %d realtime session(s) for shutdown", len(sessions))
        await asyncio.gather(*(s.drain() for s in sessions), return_exceptions=True)


async def _deny(websocket: WebSocket, err: ApiError) -> None:
    """Refuse the upgrade with a plain HTTP response (a WebSocket client sees the status)."""
    try:
        await websocket.send_denial_response(JSONResponse(err.openai_body(), status_code=err.status))
    except RuntimeError:  # the ASGI server lacks the denial extension: a bare close (HTTP 403)
        await websocket.close(1013 if err.status == 503 else 1008, err.message)


@router.websocket("/v1/realtime")
async def realtime(websocket: WebSocket) -> None:
    state = websocket.app.state
    settings: Settings = state.settings
    service: EngineService = state.service
    intent = websocket.query_params.get("intent")
    if intent not in (None, "transcription"):
        await _deny(websocket, ApiError(400, f"this server serves transcription sessions only; connect with "
                                             f"?intent=transcription (got intent={intent!r})", param="intent"))
        return
    if not service.try_acquire():
        msg = "server is shutting down" if service.draining else "server is at capacity (--max-inflight); retry later"
        await _deny(websocket, ApiError(503, msg))
        return
    try:
        await _serve(websocket, settings, service, SessionRegistry.of(state), VadModelCache.of(state))
    finally:
        service.release()


async def _serve(websocket: WebSocket, settings: Settings, service: EngineService,
                 registry: SessionRegistry, vad_models: VadModelCache) -> None:
    metrics: Metrics = service.metrics
    vad_batcher = await vad_models.batcher()
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    beta = "realtime=v1" in websocket.headers.get("openai-beta", "")
    vad = VadSettings(threshold=settings.vad_threshold, prefix_padding_ms=settings.vad_prefix_padding_ms,
                      silence_duration_ms=settings.vad_silence_duration_ms)
    session = RealtimeSession(EventSender(websocket), service, vad_batcher=vad_batcher, vad=vad,
                              served_model_name=settings.served_model_name, beta=beta)
    registry.sessions.add(session)
    metrics.stream_sessions_active.labels(api=API).inc()
    logger.info("realtime session %s opened (%s shape)", session.id, "beta" if beta else "GA")
    try:
        await session.start()
        await _receive_loop(websocket, session, settings)
    finally:
        session.abort_all()
        registry.sessions.discard(session)
        metrics.stream_sessions_active.labels(api=API).dec()
        wall = time.monotonic() - session.started
        if session.audio_seconds > 0 and wall > 0:
            metrics.stream_realtime_factor.observe(session.audio_seconds / wall)
        logger.info("realtime session %s closed after %.1f s (%.1f s of audio)", session.id, wall,
                    session.audio_seconds)


async def _receive_loop(websocket: WebSocket, session: RealtimeSession, settings: Settings) -> None:
    max_bytes = settings.max_stream_frame_kib * 1024
    idle = settings.stream_idle_timeout_secs
    while not session.sender.closed:
        try:
            message = await asyncio.wait_for(websocket.receive(), timeout=idle)
        except asyncio.TimeoutError:
            if session.busy:
                continue  # transcription still in progress counts as activity
            await session.sender.send(error_event(
                f"no audio or events for {idle:g} s (--stream-idle-timeout-secs); closing the session",
                code="idle_timeout"))
            await session.sender.close(1000, "idle timeout")
            return
        if message["type"] == "websocket.disconnect":
            return
        text: str | None = message.get("text")
        data: bytes | None = message.get("bytes")
        size = len(data) if data is not None else len(text.encode()) if text is not None else 0
        if size > max_bytes:
            await session.sender.send(error_event(
                f"message of {size} bytes exceeds the {settings.max_stream_frame_kib} KiB limit "
                "(--max-stream-frame-kib); send audio in smaller chunks", code="message_too_large"))
            continue
        if text is not None:
            await session.handle_text(text)
        elif data is not None:
            await session.handle_binary(data)
