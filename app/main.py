"""The OASR server: `uvicorn --factory app.main:create_app` (or `oasr serve`).

`create_app(settings)` builds the FastAPI app (settings unset: read from the OASR_* variables);
importing this module builds nothing. `uvicorn app.main:app`, the older spelling, still works:
the module attribute `app` is built on first access (`__getattr__` below).

The app's lifespan loads the engine, starts the engine thread, the audio decoder pool and the
grpc.aio server on the same event loop, and on SIGTERM drains: readiness and gRPC health flip to
NOT_SERVING, listeners stop accepting, in-flight work gets `shutdown_grace_secs`, the rest is
cancelled (503 / UNAVAILABLE), the engine shuts down and the process exits 0. When the engine
thread dies instead (an exception escaping a step: app/engine_service.py), its open requests end
as UNAVAILABLE, the server drains the same way and exits with ENGINE_DIED_EXIT_CODE, for
Kubernetes to restart it.
"""

from __future__ import annotations

# Collection paused over this module's imports (torch's among them), resumed at its end: app/startup_gc.py.
from app.startup_gc import pause_collection, resume_collection

_PAUSED_FOR_IMPORTS = pause_collection()

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from importlib import metadata
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.audio import AudioDecoder
from app.engine_service import ENGINE_DIED_EXIT_CODE, EngineService
from app.errors import ApiError, google_shaped
from app.metrics import Metrics
from app.middleware import (
    ApiKeyMiddleware,
    BodyLimitMiddleware,
    HttpMetricsMiddleware,
    UploadTimeoutMiddleware,
)
from app.model_pool import EMBEDDED_NAME, ModelPool, ModelSpec, PooledModel, model_specs
from app.routes import google, health, listen, openai, operations
from app.settings import Settings
from engine import ASREngine

logger = logging.getLogger("oasr")


def _version() -> str:
    try:
        return metadata.version("oasr")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def _log_limits(settings: Settings) -> None:
    logger.info(
        "limits: max_audio_mib=%g max_audio_seconds=%g request_timeout_secs=%g max_inflight=%d "
        "max_concurrent_decodes=%d shutdown_grace_secs=%g stream_idle_timeout_secs=%g api_keys=%d cors=%s",
        settings.max_audio_mib, settings.max_audio_seconds, settings.request_timeout_secs, settings.max_inflight,
        settings.max_concurrent_decodes, settings.shutdown_grace_secs, settings.stream_idle_timeout_secs,
        len(settings.api_key), settings.cors_allow_origin or "off",
    )


class Drainer:
    """Runs the shutdown sequence once, whoever asks first (SIGTERM or lifespan exit)."""

    def __init__(self, app: FastAPI):
        self.app = app
        self._task: asyncio.Task[None] | None = None
        self._stop_listening: Callable[[], None] | None = None

    def start(self, stop_listening: Callable[[], None] | None = None) -> asyncio.Task[None]:
        """Begin draining; `stop_listening` (uvicorn's exit) runs once live sessions were told
        goodbye, so they get our 1001 close rather than the server's generic one."""
        if stop_listening is not None:
            self._stop_listening = stop_listening
        if self._task is None:
            self._task = asyncio.ensure_future(self._drain())
        return self._task

    async def _drain(self) -> None:
        state = self.app.state
        settings: Settings = state.settings
        models: ModelPool = state.models
        grace = settings.shutdown_grace_secs
        logger.info("draining: readiness off, %d in flight get %gs", models.inflight, grace)
        models.drain()  # every loaded engine refuses new work; nothing loads any more
        grpc_server = getattr(state, "grpc", None)
        grpc_stop = None
        if grpc_server is not None:
            grpc_server.set_serving(False)
            grpc_stop = asyncio.ensure_future(grpc_server.stop(grace))
        for hook in list(getattr(state, "drain_hooks", [])):
            with contextlib.suppress(Exception):
                await hook()
        if self._stop_listening is not None:
            self._stop_listening()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while models.inflight > 0 and loop.time() < deadline:
            await asyncio.sleep(0.05)
        await models.cancel_all("server is shutting down")
        if grpc_stop is not None:
            await grpc_stop


def _install_sigterm(app: FastAPI, drainer: Drainer) -> None:
    """Chain SIGTERM: start draining, then tell uvicorn to stop accepting and exit normally
    (setting should_exit instead of re-raising the signal, so the exit code is 0). A dead engine
    drains the same way (`on_death`: any model's engine; embedded, without signals, it only drains)."""
    models: ModelPool = app.state.models
    models.on_death = lambda reason: drainer.start()
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except ValueError:  # not the main thread (embedded use): leave signals alone
        return
    loop = asyncio.get_running_loop()
    server = getattr(previous, "__self__", None)

    def stop_listening(signum: int, frame: Any) -> None:
        if server is not None and hasattr(server, "should_exit"):
            server.should_exit = True
        elif callable(previous):
            previous(signum, frame)

    def on_sigterm(signum: int, frame: Any) -> None:
        loop.call_soon_threadsafe(drainer.start, lambda: stop_listening(signum, frame))

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:
        return
    models.on_death = lambda reason: drainer.start(lambda: stop_listening(signal.SIGTERM, None))


def exit_process(code: int) -> None:
    """Leave at once with `code` (uvicorn has no way to exit non-zero after serving)."""
    logging.shutdown()  # flush the log: the last lines say why
    os._exit(code)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    metrics: Metrics = app.state.metrics
    pause_collection()  # while the engines build; resumed once ready (app/startup_gc.py)
    try:
        await _start(app, settings, metrics)
    finally:
        resume_collection()
    try:
        yield
    finally:
        await _stop(app)


async def _start(app: FastAPI, settings: Settings, metrics: Metrics) -> None:
    _log_limits(settings)
    models = _model_pool(settings, metrics)
    service = await models.start()  # the first model (readiness means it can serve); raises if its first step did
    info = service.engine.info()
    metrics.set_build_info(_version(), str(info.get("model", "unknown")))
    app.state.models = models
    app.state.decoder = AudioDecoder(settings.max_concurrent_decodes, target_rate=service.sample_rate)
    app.state.drain_hooks = []
    from app.google.jobs import GoogleJobCodec
    from app.jobs.system import JobSystem

    app.state.jobs = await JobSystem.open(settings, models, app.state.decoder, metrics, GoogleJobCodec())
    app.state.drain_hooks.append(_stop_claiming(app.state.jobs))
    app.state.grpc = None
    if settings.grpc_port:
        from app.grpc.service import start_grpc_server
        from app.grpc.speech import GrpcDeps
        from app.live import VadModelCache

        deps = GrpcDeps(settings=settings, models=models, decoder=app.state.decoder, metrics=metrics,
                        vad_models=VadModelCache.of(app.state), jobs=app.state.jobs)
        app.state.grpc = await start_grpc_server(deps, settings)
    drainer = Drainer(app)
    _install_sigterm(app, drainer)
    if models.death is not None:  # died before on_death was set: its requests are already ended
        models.on_death(models.death)  # type: ignore[misc]  # set just above
    app.state.drainer = drainer
    logger.info("ready: %s (%s) on %s, mode=%s, grpc=%s, models=%s", info.get("model"), info.get("family"),
                info.get("device"), settings.service_mode, settings.grpc_port or "off", ", ".join(models.names))


async def _stop(app: FastAPI) -> None:
    models: ModelPool = app.state.models
    drainer: Drainer = app.state.drainer
    await drainer.start()
    await app.state.jobs.close()  # jobs still running go back to the queue
    app.state.decoder.close()
    await models.close()
    logger.info("engine stopped")
    if models.death is not None:
        logger.critical("exiting %d: %s", ENGINE_DIED_EXIT_CODE, models.death)
        app.state.exit_process(ENGINE_DIED_EXIT_CODE)


def _model_pool(settings: Settings, metrics: Metrics) -> ModelPool:
    """The models to serve: OASR_MODELS, or the one --model (behaving as a single-model server)."""
    base = settings.engine_config()
    if settings.models:  # Settings refuses --model/--ckpt-dir beside it
        specs = model_specs(settings.models, base)
    else:
        specs = [ModelSpec(settings.served_model_name or base.ckpt_dir or EMBEDDED_NAME, base)]

    def make_service(engine: ASREngine, entry: PooledModel) -> EngineService:
        return EngineService(engine, metrics, settings.max_inflight, max_held_seconds=settings.max_audio_seconds,
                             max_queue_delay_secs=settings.max_queue_delay_secs,
                             engine_label=str(entry.index))

    return ModelPool(specs, metrics, make_service, served_model_name=settings.served_model_name,
                     several=bool(settings.models), ttl_s=settings.model_ttl_secs,
                     budget_bytes=int(settings.models_memory_budget_mb * 1024 * 1024))


def _stop_claiming(jobs: Any) -> Callable[[], Any]:
    async def hook() -> None:
        jobs.worker.stop_claiming()

    return hook


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = FastAPI(title="OASR", version=_version(), lifespan=lifespan,
                  description="Open speech recognition: OpenAI- and Google-shaped APIs over one batched engine.")
    app.state.settings = settings
    app.state.metrics = Metrics()
    app.state.exit_process = exit_process  # in-process tests replace it
    routers = [health.router, openai.router, google.router, operations.router, listen.router,
               *_optional_routers(settings)]
    for router in routers:
        app.include_router(router)

    @app.exception_handler(ApiError)
    async def api_error_handler(request: Request, exc: ApiError) -> JSONResponse:
        body = exc.google_body() if google_shaped(request.url.path) else exc.openai_body()
        return JSONResponse(body, status_code=exc.status, headers=exc.headers())

    @app.exception_handler(StarletteHTTPException)
    async def http_error_handler(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Unknown routes and methods answer in the API's own envelope too, so SDKs show a message.
        err = ApiError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")
        response = await api_error_handler(request, err)
        response.headers.update(exc.headers or {})  # e.g. Allow on 405
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'body'}: {e.get('msg')}" for e in exc.errors()
        )
        err = ApiError(400, f"invalid request: {problems}")
        return await api_error_handler(request, err)

    app.add_middleware(UploadTimeoutMiddleware, seconds=settings.upload_timeout_secs)  # type: ignore[arg-type]
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)  # type: ignore[arg-type]
    app.add_middleware(ApiKeyMiddleware, keys=settings.api_key)  # type: ignore[arg-type]
    if settings.cors_allow_origin:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_allow_origin, allow_methods=["*"],
                           allow_headers=["*"])
    # The metrics middleware names a request's route before the router runs (so the API-key and
    # body-limit refusals count under theirs): FastAPI's own pages, then our routers' routes (an
    # included router is one opaque entry of app.routes).
    routes = [r for r in app.router.routes if getattr(r, "path", None)]
    routes += [route for router in routers for route in router.routes]
    app.add_middleware(HttpMetricsMiddleware, metrics=app.state.metrics, routes=routes)  # type: ignore[arg-type]
    return app


def _optional_routers(settings: Settings) -> list[APIRouter]:
    """Surfaces that live in their own modules (realtime WebSocket, browser demo)."""
    routers = []
    try:
        from app.routes import client_secrets, realtime
    except ImportError:
        realtime = None  # type: ignore[assignment]
    if realtime is not None:
        routers += [realtime.router, client_secrets.router]
    if settings.demo:
        from app.routes import demo

        routers.append(demo.router)
    return routers


def __getattr__(name: str) -> FastAPI:
    """`app.main.app`, for `uvicorn app.main:app`: built from the OASR_* variables on first access
    and kept, so every access sees the same app (an import alone builds none)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = create_app()
    globals()["app"] = built
    return built


if _PAUSED_FOR_IMPORTS:
    resume_collection()
