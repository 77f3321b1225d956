"""ASGI middleware: API keys, request-body limit and upload deadline, and per-route HTTP metrics."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from starlette.routing import BaseRoute, Match

from app.errors import ApiError, google_shaped
from app.metrics import UNMATCHED_ROUTE, Metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
DEMO_PREFIX = "/demo"  # the browser page is static and holds no secrets; its API calls carry the key
REALTIME_PATH = "/v1/realtime"
CLIENT_SECRET_PREFIX = "ek_"
"""Ephemeral client secrets (app/realtime/secrets.py) open /v1/realtime without an API key; the
route redeems them (single use, unexpired) and refuses the rest."""


def _public(path: str) -> bool:
    return path in PROBE_PATHS or path == DEMO_PREFIX or path.startswith(DEMO_PREFIX + "/")


def _error_body(path: str, err: ApiError) -> bytes:
    body = err.google_body() if google_shaped(path) else err.openai_body()
    return json.dumps(body).encode()


async def send_error(send: Send, path: str, err: ApiError, extra_headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = _error_body(path, err)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": err.status, "headers": headers + (extra_headers or [])})
    await send({"type": "http.response.body", "body": body})


def presented_keys(scope: Scope) -> list[str]:
    keys = []
    for name, value in scope.get("headers", []):
        if name == b"authorization" and value.lower().startswith((b"bearer ", b"token ")):
            # 'Token <key>' is how Deepgram's clients (GET /v1/listen) send it
            keys.append(value.split(b" ", 1)[1].decode("latin-1").strip())
        elif name in (b"x-api-key", b"x-goog-api-key"):  # x-goog-api-key: Google's clients' `api_key`
            keys.append(value.decode("latin-1").strip())
        elif name == b"sec-websocket-protocol":
            # browsers cannot set headers on WebSockets; OpenAI's clients pass the key as a subprotocol,
            # Deepgram's as the protocol after 'token' (`new WebSocket(url, ["token", key])`)
            protos = [p.strip() for p in value.decode("latin-1").split(",")]
            for proto, following in zip(protos, [*protos[1:], None]):
                if proto.startswith("openai-insecure-api-key."):
                    keys.append(proto.removeprefix("openai-insecure-api-key."))
                elif proto.lower() in ("token", "bearer") and following:
                    keys.append(following)
    return keys


def key_matches(presented: list[str], allowed: list[str]) -> bool:
    ok = False
    for p in presented:
        for a in allowed:  # constant-time compare against every key
            ok |= hmac.compare_digest(p.encode(), a.encode())
    return ok


def _realtime_credential(scope: Scope, presented: list[str]) -> bool:
    """A /v1/realtime upgrade carrying a client secret or a resume token: the route checks it
    (a resume token is the credential of the session it resumes)."""
    if scope["type"] != "websocket" or scope["path"] != REALTIME_PATH:
        return False
    if any(k.startswith(CLIENT_SECRET_PREFIX) for k in presented):
        return True
    return b"resume_token=" in scope.get("query_string", b"")


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: list[str]):
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.keys or _public(scope["path"]):
            await self.app(scope, receive, send)
            return
        presented = presented_keys(scope)
        if key_matches(presented, self.keys) or _realtime_credential(scope, presented):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "invalid or missing API key"})
            return
        err = ApiError(401, "invalid or missing API key (send 'Authorization: Bearer <key>' or 'x-api-key')",
                       code="invalid_api_key")
        await send_error(send, scope["path"], err, [(b"www-authenticate", b"Bearer")])


class BodyLimitMiddleware:
    """413 for bodies over the limit: from Content-Length before reading, or while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    def _error(self) -> ApiError:
        mib = self.max_bytes / (1024 * 1024)
        return ApiError(413, f"request body is larger than {mib:g} MiB (--max-audio-mib)", code="body_too_large")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await send_error(send, scope["path"], self._error())
                return
        received = 0
        exceeded = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                if message["type"] == "http.response.start":
                    started = True
                    await send_error(send, scope["path"], self._error())
                return
            if message["type"] == "http.response.start":
                started = True
            if not exceeded:
                await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
            if not started:
                await send_error(send, scope["path"], self._error())


class UploadTimeoutMiddleware:
    """408 for a request body that has not fully arrived within `seconds` of the request's start.

    uvicorn bounds the wait between requests, not the arrival of one: a client trickling its
    upload a byte at a time would hold its connection, and a route that takes its in-flight
    permit before reading the body (an engine slot), for as long as it likes. Here the app's
    reads of the body share one deadline; past it the app sees a disconnect, the client gets 408
    and the connection is closed. Reads after the body ended (disconnect watchers) are not bounded."""

    def __init__(self, app: ASGIApp, seconds: float):
        self.app = app
        self.seconds = seconds

    def _error(self) -> ApiError:
        return ApiError(408, f"request body did not arrive within {self.seconds:g} s (--upload-timeout-secs)",
                        code="upload_timeout")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.seconds <= 0:
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.seconds
        body_done = False
        timed_out = False
        started = False

        async def bounded_receive() -> Message:
            nonlocal body_done, timed_out
            if body_done or timed_out:
                return await receive() if not timed_out else {"type": "http.disconnect"}
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                timed_out = True
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if timed_out:
                if not started and message["type"] == "http.response.start":
                    started = True
                    await send_error(send, scope["path"], self._error(), [(b"connection", b"close")])
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, guarded_send)
        except Exception:
            if not timed_out:
                raise
        if timed_out and not started:
            await send_error(send, scope["path"], self._error(), [(b"connection", b"close")])


class HttpMetricsMiddleware:
    """Per matched route pattern (never the raw path): responses by status, wall time to the last
    body byte, and requests in flight."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Sequence[BaseRoute] = ()):
        self.app = app
        self.metrics = metrics
        self.routes = routes  # the app's routes: requests refused before routing (401, 413) count under theirs

    def _pattern(self, scope: Scope) -> str:
        """The route the router will pick: the first full match, else the first partial one (a
        known path with another method: 405), else '<unmatched>'."""
        partial = None
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return getattr(route, "path", None) or UNMATCHED_ROUTE
            if match == Match.PARTIAL and partial is None:
                partial = route
        return getattr(partial, "path", None) or UNMATCHED_ROUTE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method, route = scope["method"], self._pattern(scope)
        in_flight = self.metrics.http_requests_in_flight.labels(method=method, route=route)
        in_flight.inc()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            in_flight.dec()
            self.metrics.http_requests.labels(method=method, route=route, status=str(status)).inc()
            self.metrics.http_request_duration.labels(method=method, route=route).observe(
                time.perf_counter() - started)
