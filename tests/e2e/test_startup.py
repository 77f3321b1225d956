"""Both ways to start the server with uvicorn serve the same API: the factory (`make serve`, the
image, every other e2e module) and the older module attribute `uvicorn app.main:app`, which
existing deployments still use."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.e2e.conftest import start_server


def test_uvicorn_app_main_app_still_serves(tmp_path: Path) -> None:
    server = start_server(tmp_path, {"OASR_GRPC_PORT": "0", "OASR_SERVED_MODEL_NAME": "legacy-spelling"},
                          app=("app.main:app",))
    try:
        models = httpx.get(f"{server.base_url}/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["legacy-spelling"]  # the OASR_* settings were read
    finally:
        assert server.terminate() == 0
    assert "Application startup complete" in server.log()
