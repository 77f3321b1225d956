"""GET /v1/realtime: OpenAI's realtime transcription protocol over a WebSocket.

Admission happens before the handshake: each session holds one inflight permit for its
whole life, and without a free one the upgrade is answered with HTTP 503. A client may open
the socket with an API key or with an ephemeral client secret (`ek_…`, app/realtime/secrets.py),
which is redeemed here and starts the session with the configuration it was minted for.

After accept the route only moves messages: frames go to `RealtimeSession`, which owns the
protocol. A session ends on a deliberate client close (1000), after
`--stream-idle-timeout-secs` without client messages and without transcription in progress,
or at shutdown (close 1001). Any other drop parks it for `--realtime-resume-grace-secs`
(app/realtime/registry.py): a reconnect with `?resume_token=…&last_event_id=…` takes it back,
gets `session.resumed` and every event after `last_event_id`, and goes on. Refused resumes
close with 4400 (no such event to resume after), 4401 (unknown token) or 4408 (the session
has ended: grace period over, or the server restarted since it issued the token). Docs:
docs/streaming.md#resumable-sessions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Literal

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse

from app.admission import Permit, Refused
from app.engine_service import EngineService
from app.errors import ApiError, to_api_error
from app.live.sender import EventSender
from app.live.vad import VadModelCache
from app.metrics import Metrics
from app.middleware import presented_keys
from app.model_pool import ModelPool
from app.realtime.config import VadSettings
from app.realtime.events import error_event
from app.realtime.registry import SessionRegistry
from app.realtime.secrets import PREFIX, ClientSecret, ClientSecretStore, SecretRefused
from app.realtime.session import API, RealtimeSession
from app.settings import Settings
from engine.errors import EngineError

logger = logging.getLogger(__name__)
router = APIRouter(tags=["realtime"])

SUBPROTOCOL = "realtime"
"""Browsers pass the API key as a subprotocol next to this one; the server must echo one back."""
REPLAY_EVENTS = 4096
"""Events a resumable session keeps for a reconnecting client (a few minutes of deltas)."""
CLOSE_RESUME_INVALID = 4400
CLOSE_RESUME_UNKNOWN = 4401
CLOSE_RESUME_ENDED = 4408
CLOSE_SUPERSEDED = 4409
DELIBERATE_CLOSE = 1000
"""The client close code that ends a session; any other close leaves it resumable. 1005 (no
code) does not count: uvicorn reports a lost TCP connection as 1005 too."""

Outcome = Literal["ended", "dropped"]


async def _deny(websocket: WebSocket, err: ApiError) -> None:
    """Refuse the upgrade with a plain HTTP response (a WebSocket client sees the status)."""
    try:
        await websocket.send_denial_response(JSONResponse(err.openai_body(), status_code=err.status,
                                                          headers=err.headers()))
    except RuntimeError:  # the ASGI server lacks the denial extension: a bare close (HTTP 403)
        await websocket.close(1013 if err.status == 503 else 1008, err.message)


def vad_settings(settings: Settings) -> VadSettings:
    return VadSettings(threshold=settings.vad_threshold, prefix_padding_ms=settings.vad_prefix_padding_ms,
                       silence_duration_ms=settings.vad_silence_duration_ms)


def _client_secret(websocket: WebSocket) -> str | None:
    return next((k for k in presented_keys(websocket.scope) if k.startswith(PREFIX)), None)


@router.websocket("/v1/realtime")
async def realtime(websocket: WebSocket) -> None:
    state = websocket.app.state
    settings: Settings = state.settings
    models: ModelPool = state.models
    intent = websocket.query_params.get("intent")
    if intent not in (None, "transcription"):
        await _deny(websocket, ApiError(400, f"this server serves transcription sessions only; connect with "
                                             f"?intent=transcription (got intent={intent!r})", param="intent"))
        return
    registry = SessionRegistry.of(state)
    token = websocket.query_params.get("resume_token")
    if token is not None:
        await _resume(websocket, registry, settings, models, token, websocket.query_params.get("last_event_id"))
        return
    secret: ClientSecret | None = None
    presented = _client_secret(websocket)
    if presented is not None:
        try:
            secret = ClientSecretStore.of(state).redeem(presented)
        except SecretRefused as exc:
            await _deny(websocket, ApiError(401, str(exc), code="invalid_client_secret"))
            return
    try:  # the model the session starts on: its client secret's, else the first
        service = await models.service_for(secret.config.transcription.model or None if secret else None)
    except EngineError as exc:
        await _deny(websocket, to_api_error(exc))
        return
    try:
        permit = await service.admission.take_live()
    except Refused as exc:
        await _deny(websocket, exc)
        return
    try:
        session = await _open(websocket, settings, service, permit, registry, VadModelCache.of(state), secret,
                              models)
    except BaseException:
        permit.release()
        raise
    await _run(websocket, session, registry, settings)


async def _open(websocket: WebSocket, settings: Settings, service: EngineService, permit: Permit,
                registry: SessionRegistry, vad_models: VadModelCache, secret: ClientSecret | None,
                models: ModelPool) -> RealtimeSession:
    """Accept the connection and start a session on it (the caller's permit becomes the session's)."""
    metrics: Metrics = service.metrics
    vad_batcher = await vad_models.batcher()
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    beta = "realtime=v1" in websocket.headers.get("openai-beta", "")
    sender = EventSender(websocket, replay=REPLAY_EVENTS if registry.grace_s > 0 else 0)
    session = RealtimeSession(sender, service, vad_batcher=vad_batcher, vad=vad_settings(settings),
                              served_model_name=settings.served_model_name, beta=beta,
                              session_id=secret.session_id if secret else None,
                              config=secret.config if secret else None, models=models, permit=permit)

    async def finish() -> None:
        session.abort_all()
        metrics.stream_sessions_active.labels(api=API).dec()
        if session.permit is not None:
            session.permit.release()  # the session's permit, on the model it ended on
        wall = time.monotonic() - session.started
        if session.audio_seconds > 0 and wall > 0:
            metrics.stream_realtime_factor.observe(session.audio_seconds / wall)
        logger.info("realtime session %s closed after %.1f s (%.1f s of audio)", session.id, wall,
                    session.audio_seconds)

    resume = registry.add(session, finish)
    metrics.stream_sessions_active.labels(api=API).inc()
    logger.info("realtime session %s opened (%s shape%s)", session.id, "beta" if beta else "GA",
                ", client secret" if secret else "")
    await session.start(resume)
    return session


async def _resume(websocket: WebSocket, registry: SessionRegistry, settings: Settings, models: ModelPool,
                  token: str, last_event_id: str | None) -> None:
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    if models.draining:
        await websocket.close(1001, "server is shutting down")
        return
    session, ended = registry.lookup(token)
    if session is None:
        if ended:
            await websocket.close(CLOSE_RESUME_ENDED, "the session has ended (its resume grace period is over)")
        elif registry.issued_by_another_process(token):
            # a close reason holds at most 123 bytes
            await websocket.close(CLOSE_RESUME_ENDED, "the session has ended: the server restarted (or this is "
                                                      "another replica); start a new session")
        else:
            await websocket.close(CLOSE_RESUME_UNKNOWN, "unknown resume token")
        return
    if not last_event_id or not session.sender.knows(last_event_id):
        await websocket.close(CLOSE_RESUME_INVALID, "last_event_id must name an event the session sent and still "
                                                    "holds (the last one you received)")
        return
    registry.claim(session)
    resume = registry.resume_info(session) or {}
    replaced = await session.reattach(websocket, last_event_id, resume)
    logger.info("realtime session %s resumed after event %s", session.id, last_event_id)
    if replaced is not None:  # the old connection was still open (its drop not noticed yet)
        try:
            await replaced.close(CLOSE_SUPERSEDED, "the session was resumed on another connection")
        except Exception as exc:
            logger.debug("closing the superseded connection failed: %s", exc)
    await _run(websocket, session, registry, settings)


async def _run(websocket: WebSocket, session: RealtimeSession, registry: SessionRegistry, settings: Settings) -> None:
    """Serve `session` on `websocket` until it ends or the connection drops (then park it)."""
    outcome: Outcome = "dropped"
    try:
        outcome = await _receive_loop(websocket, session, settings)
    finally:
        if outcome == "dropped" and registry.grace_s > 0 and not session.draining:
            if session.sender.detach(websocket):
                registry.park(session)
            # else: another connection resumed the session; it is that one's now
        elif session.sender.websocket in (websocket, None):
            await registry.end(session)


async def _receive_loop(websocket: WebSocket, session: RealtimeSession, settings: Settings) -> Outcome:
    max_bytes = settings.max_stream_frame_kib * 1024
    idle = settings.stream_idle_timeout_secs
    while not session.sender.closed:
        try:
            message: dict[str, Any] = await asyncio.wait_for(websocket.receive(), timeout=idle)
        except asyncio.TimeoutError:
            if session.busy:
                continue  # transcription still in progress counts as activity
            await session.sender.send(error_event(
                f"no audio or events for {idle:g} s (--stream-idle-timeout-secs); closing the session",
                code="idle_timeout"))
            await session.sender.close(1000, "idle timeout")
            return "ended"
        except RuntimeError:  # the connection was closed under us (superseded by a resumed one)
            return "dropped"
        if message["type"] == "websocket.disconnect":
            code = message.get("code", 1000)
            logger.info("realtime session %s: client disconnected (%s)", session.id, code)
            return "ended" if code == DELIBERATE_CLOSE else "dropped"
        text: str | None = message.get("text")
        data: bytes | None = message.get("bytes")
        size = len(data) if data is not None else len(text.encode()) if text is not None else 0
        if size > max_bytes:
            await session.sender.send(error_event(
                f"message of {size} bytes exceeds the {settings.max_stream_frame_kib} KiB limit "
                "(--max-stream-frame-kib); send audio in smaller chunks", code="message_too_large"))
            continue
        async with session.input_lock:
            if session.sender.websocket is not websocket:
                return "dropped"  # a resumed connection took over: this one's messages are not the session's
            if text is not None:
                await session.handle_text(text)
            elif data is not None:
                await session.handle_binary(data)
    return "ended"
