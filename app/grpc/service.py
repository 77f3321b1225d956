"""The grpc.aio listener: `oasr.speech.v1.Speech` (also as `google.cloud.speech.v1.Speech`),
standard health and server reflection.

Runs on the same event loop as uvicorn (started from the FastAPI lifespan), so RPC handlers
reach the engine through the same `EngineService` as the HTTP routes.

    app/grpc/service.py   the listener: bind, health following readiness, reflection, drain; Speech is
                          served under our name and Google's (google.cloud.speech.v1.Speech)
    app/grpc/speech.py    the servicer: Recognize, StreamingRecognize (buffered on offline engines)
    app/grpc/live.py      one live StreamingRecognize: engine streaming requests, server-VAD turns
    app/grpc/audio.py     stream audio: headerless chunks -> model-rate samples, container buffer
    app/grpc/operations.py  LongRunningRecognize's Operations service (batch jobs, app/jobs)
    app/grpc/auth.py      API keys in call metadata
    app/grpc/convert.py   errors -> status codes (message conversions: app/google/convert.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc
from google.longrunning import operations_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from app.google import wire as google_wire
from app.grpc.operations import OperationsServicer
from app.grpc.speech import ActiveCalls, GrpcDeps, SpeechServicer
from app.settings import Settings
from protos.oasr.speech.v1 import speech_pb2, speech_pb2_grpc

logger = logging.getLogger(__name__)

SERVICE_NAME = speech_pb2.DESCRIPTOR.services_by_name["Speech"].full_name
HEALTH_POLL_S = 1.0  # how often health follows the engine's readiness


class GrpcServer:
    """The running listener; `set_serving(False)` flips health at once, `stop(grace)` drains."""

    def __init__(self, server: grpc.aio.Server, health_servicer: health.aio.HealthServicer, service: Any,
                 calls: ActiveCalls):
        self.server = server
        self.health = health_servicer
        self.service = service
        self.calls = calls
        self._serving = True
        self._watch: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[Any]] = set()

    def start_watching(self) -> None:
        self._watch = asyncio.ensure_future(self._follow_readiness())

    async def _set_all(self, status: int) -> None:
        for name in ("", SERVICE_NAME, google_wire.SPEECH_SERVICE):
            await self.health.set(name, status)

    async def _follow_readiness(self) -> None:
        """Health mirrors /readyz: SERVING while the engine thread beats and we are not draining."""
        while self._serving:
            ready = self.service is not None and self.service.ready
            status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
            await self._set_all(status)
            await asyncio.sleep(HEALTH_POLL_S)

    def set_serving(self, serving: bool) -> None:
        """Called from the drain: False is permanent (health ignores later updates)."""
        if serving or not self._serving:
            return
        self._serving = False
        if self._watch is not None:
            self._watch.cancel()
        task = asyncio.ensure_future(self.health.enter_graceful_shutdown())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def stop(self, grace: float) -> None:
        """Give running recognition calls `grace` seconds, then stop the listener and cancel what
        is left. New calls meanwhile are refused by the engine service's drain (UNAVAILABLE), and
        health says NOT_SERVING. Health Watch streams never end on their own, so waiting inside
        `server.stop(grace)` would hold the exit for the whole grace; and a second `stop()` while
        one is in flight crashed the process in grpc's core (a segfault in about 1 of 25 runs of
        tests/app/test_grpc_service.py), so there is exactly one, after the wait."""
        self.set_serving(False)
        for task in list(self._pending):
            with contextlib.suppress(Exception):
                await task
        try:
            await asyncio.wait_for(self.calls.idle(), grace)
            logger.info("gRPC drain: recognition calls done; closing the listener")
        except asyncio.TimeoutError:
            logger.info("gRPC drain: %d recognition calls still running after %gs; cancelling them",
                        self.calls.count, grace)
        await self.server.stop(0)
        logger.info("gRPC listener stopped")


class _Handlers:
    """Stands in for the server while the generated `add_SpeechServicer_to_server` hands over its
    method handlers, so they can be registered under more than one service name."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, name: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers = handlers


def add_speech_servicer(servicer: SpeechServicer, server: grpc.aio.Server) -> None:
    """Serve the Speech methods as `oasr.speech.v1.Speech` and as Google's
    `google.cloud.speech.v1.Speech`: the messages share field numbers, so Google's client is
    answered by the same handlers."""
    capture = _Handlers()
    speech_pb2_grpc.add_SpeechServicer_to_server(servicer, capture)  # type: ignore[no-untyped-call]
    for name in (SERVICE_NAME, google_wire.SPEECH_SERVICE):
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, capture.handlers),))
        server.add_registered_method_handlers(name, capture.handlers)


async def start_grpc_server(deps: GrpcDeps, settings: Settings) -> GrpcServer:
    """Bind `{host}:{grpc_port}` and start serving; raises when the port cannot be bound."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ]
    )
    calls = ActiveCalls()
    add_speech_servicer(SpeechServicer(deps, calls), server)
    if deps.jobs is not None:
        operations = OperationsServicer(deps.jobs, settings, deps.metrics)
        operations_pb2_grpc.add_OperationsServicer_to_server(operations, server)  # type: ignore[no-untyped-call]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, "google.longrunning.Operations",
         reflection.SERVICE_NAME),
        server,
    )
    address = f"{settings.host}:{settings.grpc_port}"
    if server.add_insecure_port(address) == 0:
        raise RuntimeError(f"cannot bind the gRPC listener to {address}")
    await server.start()
    grpc_server = GrpcServer(server, health_servicer, deps.models, calls)
    await grpc_server._set_all(health_pb2.HealthCheckResponse.NOT_SERVING)
    grpc_server.start_watching()
    logger.info("gRPC listening on %s (max message %d bytes)", address, settings.max_body_bytes)
    return grpc_server
