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
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse

from app.admission import Refused
from app.deepgram import messages as msg
from app.deepgram.params import QueryError, parse_params
from app.deepgram.session import (
    API,
    CLOSE_INTERNAL,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    ListenSession,
    say_shutting_down,
)
from app.engine_service import EngineService
from app.live import VadModelCache
from app.live.sender import EventSender
from app.model_pool import ModelPool
from app.requests import ModelNotFound
from app.settings import Settings
from engine.errors import EngineError

logger = logging.getLogger(__name__)
router = APIRouter(tags=["deepgram"])

SUBPROTOCOLS = ("token", "bearer")
"""Browsers pass the key as `new WebSocket(url, ["token", KEY])`; the server echoes the scheme."""


def model_identity(service: EngineService, settings: Settings, name: str | None = None) -> msg.ModelIdentity:
    """Deepgram's model_info: `name` (the served model's id with several models), else the served
    name or the checkpoint's."""
    info = service.engine.info()
    try:
        version = metadata.version("oasr")
    except metadata.PackageNotFoundError:
        version = "0.0.0"
    return msg.ModelIdentity(name=name or settings.served_model_name or str(info.get("model", "unknown")),
                             version=version, arch=str(info.get("family", "unknown")))


@router.websocket("/v1/listen")
async def listen(websocket: WebSocket) -> None:
    state = websocket.app.state
    models: ModelPool = state.models
    model = websocket.query_params.get("model") if models.several else None
    try:  # `model` picks the engine only with several models; a single-model server ignores it, as before
        name = models.resolve(model).name if models.several else None
        service = await models.service_for(model)
    except ModelNotFound as exc:  # answered as a bad query parameter is: Error, then close 1008
        await websocket.accept()
        sender = EventSender(websocket)
        await sender.send(msg.error(str(exc), "InvalidQuery"))
        await sender.close(CLOSE_POLICY, f"INVALID_QUERY: {exc}")
        return
    except EngineError as exc:  # the model could not be loaded: refused like a full server
        await _deny(websocket, str(exc))
        return
    try:
        permit = await service.admission.take_live()
    except Refused as exc:  # admitted live sessions keep their cadence; a full or draining server says so
        await _deny(websocket, exc.message, exc.retry_after)
        return
    try:
        await _serve(websocket, state.settings, service, getattr(state, "drain_hooks", []), VadModelCache.of(state),
                     name)
    finally:
        permit.release()


async def _deny(websocket: WebSocket, message: str, retry: int | None = None) -> None:
    """Refuse the upgrade with HTTP 503 (Retry-After when known)."""
    headers = {} if retry is None else {"Retry-After": str(retry)}
    try:
        await websocket.send_denial_response(JSONResponse({"err_code": "UNAVAILABLE", "err_msg": message},
                                                          status_code=503, headers=headers))
    except RuntimeError:  # the ASGI server lacks the denial extension: a bare close (HTTP 403)
        await websocket.close(1013, message)


async def _serve(websocket: WebSocket, settings: Settings, service: EngineService,
                 drain_hooks: list[Callable[[], Awaitable[None]]], vad_models: VadModelCache,
                 model_name: str | None = None) -> None:
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=next((p for p in SUBPROTOCOLS if p in offered), None))
    sender = EventSender(websocket)

    async def drain_while_opening() -> None:
        """Shutdown before the session exists (the first session loads the VAD model): the
        same goodbye as an open session's, not the ASGI server's generic close."""
        await say_shutting_down(sender)

    drain_hooks.append(drain_while_opening)
    try:
        params = parse_params(websocket.query_params.multi_items(), settings.vad_silence_duration_ms)
        session = ListenSession(sender, service, params, vad=await vad_models.batcher(), settings=settings,
                                model=model_identity(service, settings, model_name))
    except QueryError as exc:
        logger.info("listen: refused %s: %s", websocket.url.query, exc)
        await sender.send(msg.error(str(exc), "InvalidQuery"))
        await sender.close(CLOSE_POLICY, f"INVALID_QUERY: {exc}")
        return
    finally:
        drain_hooks.remove(drain_while_opening)
    if sender.closed:  # the server began shutting down while the session opened
        return
    active = service.metrics.stream_sessions_active.labels(api=API)
    active.inc()
    drain_hooks.append(session.drain)  # shutdown closes the session with 1001
    logger.info("listen %s opened: %s", session.id, websocket.url.query)
    session.start()
    try:
        async for text, data in _messages(websocket, session, settings):
            if text is not None:
                await session.handle_text(text)
            else:
                await session.handle_binary(data or b"")
    finally:
        drain_hooks.remove(session.drain)
        session.end()
        active.dec()


async def _messages(websocket: WebSocket, session: ListenSession,
                    settings: Settings) -> AsyncIterator[tuple[str | None, bytes | None]]:
    """The client's (text, bytes) messages until it leaves or the session closes; a session idle
    for --stream-idle-timeout-secs, or a message over --max-stream-frame-kib, closes it."""
    limit_kib, idle = settings.max_stream_frame_kib, settings.stream_idle_timeout_secs
    while not session.sender.closed:
        try:
            message = await asyncio.wait_for(websocket.receive(), timeout=idle)
        except asyncio.TimeoutError:
            if not session.busy:  # transcription still in progress counts as activity
                await session.fail(CLOSE_INTERNAL, f"NET-0001: no audio or KeepAlive for {idle:g} s "
                                                   "(--stream-idle-timeout-secs)", "Timeout")
            continue
        if message["type"] == "websocket.disconnect":
            return
        text, data = message.get("text"), message.get("bytes")
        size = len(data) if data is not None else len((text or "").encode())
        if size > limit_kib * 1024:
            await session.fail(CLOSE_TOO_BIG, f"a message of {size} bytes exceeds the {limit_kib} KiB limit "
                                              "(--max-stream-frame-kib); send audio in smaller chunks", "MessageTooBig")
            continue
        yield text, data
