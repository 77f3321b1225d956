"""FastAPI dependencies: typed access to what `create_app()` stored on `app.state`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.audio import AudioDecoder
from app.engine_service import EngineService
from app.metrics import Metrics
from app.model_pool import ModelPool
from app.settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_models(request: Request) -> ModelPool:
    models: ModelPool = request.app.state.models
    return models


async def get_service(request: Request) -> EngineService:
    """The first (default) model's service, loaded if it was unloaded; routes whose request names
    a model ask `ModelsDep.service_for(model)` instead."""
    return await get_models(request).service_for(None)


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def get_decoder(request: Request) -> AudioDecoder:
    decoder: AudioDecoder = request.app.state.decoder
    return decoder


SettingsDep = Annotated[Settings, Depends(get_settings)]
ModelsDep = Annotated[ModelPool, Depends(get_models)]
ServiceDep = Annotated[EngineService, Depends(get_service)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
DecoderDep = Annotated[AudioDecoder, Depends(get_decoder)]
