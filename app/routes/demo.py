"""GET /demo: the browser client (examples/web) served by the app when `--demo` is set.

The page is static and holds no secrets; it reaches the API one level up (`/v1/...`), so the
same origin serves both and no CORS set-up is needed.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from app.errors import ApiError

logger = logging.getLogger(__name__)
router = APIRouter(tags=["demo"])

_REPO_WEB = Path(__file__).resolve().parents[2] / "examples" / "web"
"""Source checkouts, editable installs and the container image (which copies examples/)."""
_INSTALLED_WEB = Path(sys.prefix) / "share" / "oasr" / "web"
"""Wheel installs: pyproject's data-files put examples/web here."""

_MEDIA_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


def web_dir() -> Path:
    """The folder holding index.html; raises RuntimeError naming where it looked."""
    for candidate in (_REPO_WEB, _INSTALLED_WEB):
        if (candidate / "index.html").is_file():
            return candidate
    raise RuntimeError(f"--demo is set but the browser client is missing (looked in {_REPO_WEB} and {_INSTALLED_WEB})")


def _files() -> dict[str, Path]:
    """Only the page's own files are served: a fixed list, so no request path reaches the disk."""
    root = web_dir()
    return {p.name: p for p in root.iterdir() if p.is_file() and p.suffix in _MEDIA_TYPES}


@router.get("/demo", include_in_schema=False)
async def demo_root() -> RedirectResponse:
    # Relative URLs in the page (app.js, pcm-worklet.js) resolve against /demo/.
    return RedirectResponse("demo/", status_code=307)


@router.get("/demo/", include_in_schema=False)
async def demo_index() -> FileResponse:
    return await demo_file("index.html")


@router.get("/demo/{name}", include_in_schema=False)
async def demo_file(name: str) -> FileResponse:
    path = _files().get(name)
    if path is None:
        raise ApiError(404, f"no such demo file: {name}")
    return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers={"Cache-Control": "no-cache"})
