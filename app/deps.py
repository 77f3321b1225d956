"""FastAPI dependencies: typed access to what `create_app()` stored on `app.state`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.audio import AudioDecoder
from app.engine_service import EngineService
from app.metrics import Metrics
from app.settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_service(request: Request) -> EngineService:
    service: EngineService = request.app.state.service
    return service


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def get_decoder(request: Request) -> AudioDecoder:
    decoder: AudioDecoder = request.app.state.decoder
    return decoder


SettingsDep = Annotated[Settings, Depends(get_settings)]
ServiceDep = Annotated[EngineService, Depends(get_service)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
DecoderDep = Annotated[AudioDecoder, Depends(get_decoder)]
