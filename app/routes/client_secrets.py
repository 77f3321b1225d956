"""Ephemeral client secrets for browsers (app/realtime/secrets.py), minted with the API key:

    POST /v1/realtime/client_secrets           GA:   {expires_after: {anchor, seconds}, session: {type: "transcription", ...}}
                                               ->    {value, expires_at, session}
    POST /v1/realtime/transcription_sessions   beta: {input_audio_format, ..., client_secret: {expires_at: {anchor, seconds}}}
                                               ->    {...session, client_secret: {value, expires_at}}

The session configuration is validated as a `session.update` would be, so a secret never
carries one its session would refuse.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.deps import ModelsDep, SettingsDep
from app.engine_service import EngineService
from app.errors import ApiError, to_api_error
from app.live.vad import VadModelCache
from app.model_pool import ModelPool
from app.realtime.audio_input import make_denoiser
from app.realtime.config import SessionConfig
from app.realtime.events import ProtocolError, new_id
from app.realtime.options import decoding_options
from app.realtime.secrets import BETA_DEFAULT_TTL_S, DEFAULT_TTL_S, MAX_TTL_S, MIN_TTL_S, ClientSecretStore
from app.realtime.update import parse_beta_update, parse_ga_update
from app.requests import ModelNotFound
from app.routes.realtime import vad_settings
from app.settings import Settings
from engine.errors import EngineError
from engine.vad import SAMPLE_RATE as VAD_SAMPLE_RATE

router = APIRouter(tags=["realtime"])


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


def _ttl(value: Any, param: str, default: int) -> int:
    """Seconds from `{anchor: "created_at", seconds}`."""
    if value is None:
        return default
    if not isinstance(value, dict):
        raise ApiError(400, f"{param} must be an object", param=param)
    if value.get("anchor", "created_at") != "created_at":
        raise ApiError(400, f"{param}.anchor must be 'created_at'", param=f"{param}.anchor")
    seconds = value.get("seconds", default)
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_TTL_S <= seconds <= MAX_TTL_S:
        raise ApiError(400, f"{param}.seconds must be an integer in [{MIN_TTL_S}, {MAX_TTL_S}], got {seconds!r}",
                       param=f"{param}.seconds")
    return seconds


async def _session_config(request: Request, settings: Settings, models: ModelPool, session: dict[str, Any],
                          *, beta: bool) -> SessionConfig:
    vad = vad_settings(settings)
    vad_model = await VadModelCache.of(request.app.state).batcher()

    def vad_ready(service: EngineService) -> bool:
        return service.sample_rate == VAD_SAMPLE_RATE and vad_model is not None

    try:
        default = await models.service_for(None)
        start = SessionConfig(turn_detection=vad.detection() if vad_ready(default) else None)
        if beta:
            config = parse_beta_update({"session": session}, start, vad)
        else:
            config = parse_ga_update({"session": session}, start, vad)
        param = "session.input_audio_transcription" if beta else "session.audio.input.transcription"
        try:  # checked against the model the session will run on
            service = await models.service_for(config.transcription.model or None)
        except ModelNotFound as exc:
            raise ApiError(400, str(exc), param=f"{param}.model", code="model_not_found") from exc
        decoding_options(config.transcription, logprobs=config.logprobs, engine=service,
                         served_model_name=None, param=param)
        make_denoiser(config.noise_reduction, service.sample_rate)
    except ProtocolError as exc:
        raise ApiError(400, exc.message, param=exc.param, code=exc.code) from exc
    except EngineError as exc:  # a model that could not be loaded
        raise to_api_error(exc) from exc
    if config.server_vad and not vad_ready(service):
        raise ApiError(400, "server VAD is not available on this server; set turn_detection to null",
                       param="session.turn_detection", code="server_vad_unavailable")
    return config


@router.post("/v1/realtime/client_secrets")
async def create_client_secret(request: Request, settings: SettingsDep, models: ModelsDep) -> JSONResponse:
    body = await _body(request)
    ttl = _ttl(body.get("expires_after"), "expires_after", DEFAULT_TTL_S)
    session = body.get("session") or {"type": "transcription"}
    if not isinstance(session, dict):
        raise ApiError(400, "session must be an object", param="session")
    if session.get("type", "transcription") != "transcription":
        raise ApiError(400, f"this server serves transcription sessions only; session.type must be 'transcription', "
                            f"got {session.get('type')!r}", param="session.type", code="unsupported_session_type")
    config = await _session_config(request, settings, models, session, beta=False)
    secret = ClientSecretStore.of(request.app.state).mint(config, ttl, new_id("sess"))
    rendered = {**config.render_ga(secret.session_id), "expires_at": int(secret.expires_at)}
    return JSONResponse({"value": secret.value, "expires_at": int(secret.expires_at), "session": rendered})


@router.post("/v1/realtime/transcription_sessions")
async def create_transcription_session(request: Request, settings: SettingsDep, models: ModelsDep) -> JSONResponse:
    body = await _body(request)
    client_secret = body.pop("client_secret", None)
    if client_secret is not None and not isinstance(client_secret, dict):
        raise ApiError(400, "client_secret must be an object", param="client_secret")
    ttl = _ttl((client_secret or {}).get("expires_at"), "client_secret.expires_at", BETA_DEFAULT_TTL_S)
    body.pop("modalities", None)  # beta clients send ["text"]; a transcription session has no other
    config = await _session_config(request, settings, models, body, beta=True)
    secret = ClientSecretStore.of(request.app.state).mint(config, ttl, new_id("sess"))
    return JSONResponse({**config.render_beta(secret.session_id),
                         "client_secret": {"value": secret.value, "expires_at": int(secret.expires_at)}})
