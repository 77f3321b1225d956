"""Probes, metrics and the model list."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from app.deps import MetricsDep, ModelsDep, SettingsDep

router = APIRouter(tags=["operations"])
_CREATED = int(time.time())


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process and its event loop answer."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(models: ModelsDep) -> JSONResponse:
    """Readiness: the first model's engine thread has stepped since start-up and its heartbeat is
    fresh; with several models, `models` gives each one's state."""
    body = models.readiness()
    return JSONResponse(body, status_code=200 if body["ready"] else 503)


@router.get("/metrics")
async def metrics(m: MetricsDep) -> Response:
    data, content_type = m.render()
    return Response(data, media_type=content_type)


@router.get("/v1/models")
async def list_models(models: ModelsDep, settings: SettingsDep) -> dict[str, object]:
    """The served models. With several (OASR_MODELS) every configured one, loaded or not: `loaded`
    and `state` say which; `info` is its card from its last load, or before its first one described
    from its checkpoint's configuration (`info.described`: true; no kernels or parameter count yet), null
    when not even that is known (a model name not downloaded yet)."""
    if models.several:
        data = [{"object": "model", "created": _CREATED, "owned_by": "oasr", **card} for card in models.cards()]
        return {"object": "list", "data": data}
    service = await models.service_for(None)
    info = service.engine.info()
    model_id = settings.served_model_name or info["model"]
    return {
        "object": "list",
        "data": [{"id": model_id, "object": "model", "created": _CREATED, "owned_by": "oasr", "info": info}],
    }
