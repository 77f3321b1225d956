"""Probes, metrics and the model list."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from app.deps import MetricsDep, ServiceDep, SettingsDep

router = APIRouter(tags=["operations"])
_CREATED = int(time.time())


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process and its event loop answer."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(service: ServiceDep) -> JSONResponse:
    """Readiness: the engine thread has stepped since start-up and its heartbeat is fresh."""
    body = service.readiness()
    return JSONResponse(body, status_code=200 if body["ready"] else 503)


@router.get("/metrics")
async def metrics(m: MetricsDep) -> Response:
    data, content_type = m.render()
    return Response(data, media_type=content_type)


@router.get("/v1/models")
async def list_models(service: ServiceDep, settings: SettingsDep) -> dict[str, object]:
    info = service.engine.info()
    model_id = settings.served_model_name or info["model"]
    return {
        "object": "list",
        "data": [{"id": model_id, "object": "model", "created": _CREATED, "owned_by": "oasr", "info": info}],
    }
