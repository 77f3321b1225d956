"""What every `oasr` command shares: exit codes, `CliError`, the one-line parser, HTTP client bits."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

EXIT_OK = 0
EXIT_FAILURE = 1
"""The work failed: the server answered with an error, audio could not be decoded, the model failed."""
EXIT_USAGE = 2
"""Bad command line: unknown flag, invalid value, missing input file."""
EXIT_UNREACHABLE = 3
"""No server answered at --url (connection refused, DNS, timeout while connecting)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C."""

DEFAULT_URL = "http://127.0.0.1:8000"
HTTP_TIMEOUT_S = 600.0
"""Long files take a while; the server's own request timeout (600 s by default) ends them first."""

EPILOG = f"""exit codes:
  {EXIT_OK}    success
  {EXIT_FAILURE}    the work failed (server error response, undecodable audio, model failure)
  {EXIT_USAGE}    usage error (unknown flag, bad value, missing input file)
  {EXIT_UNREACHABLE}    server unreachable at --url
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)

docs: docs/api.md (HTTP, WebSocket, gRPC), docs/configuration.md (every serve flag)"""


class CliError(Exception):
    """Ends the command with a one-line message on stderr and `code` as the exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE):
        super().__init__(message)
        self.message = message
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors on one line (its default prints the usage block too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _api_key(args: argparse.Namespace) -> str | None:
    if args.api_key:
        return str(args.api_key)
    keys = [k.strip() for k in os.environ.get("OASR_API_KEY", "").split(",") if k.strip()]
    return keys[0] if keys else None


def _headers(args: argparse.Namespace) -> dict[str, str]:
    key = _api_key(args)
    return {"Authorization": f"Bearer {key}"} if key else {}


def _error_message(response: Any) -> str:
    """The server's own message from an OpenAI-shaped error body, else the status line."""
    try:
        body = response.json()
        message = body["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text.strip()[:200] or response.reason_phrase
    return f"HTTP {response.status_code}: {message}"


@contextmanager
def _http(args: argparse.Namespace) -> Iterator[Any]:
    import httpx

    url = args.url.rstrip("/")
    try:
        with httpx.Client(base_url=url, headers=_headers(args),
                          timeout=httpx.Timeout(HTTP_TIMEOUT_S, connect=10.0)) as client:
            yield client
    except httpx.ConnectError as exc:
        raise CliError(f"cannot reach the server at {url}: {exc}", EXIT_UNREACHABLE) from exc
    except httpx.ConnectTimeout as exc:
        raise CliError(f"cannot reach the server at {url}: connect timed out", EXIT_UNREACHABLE) from exc
    except httpx.HTTPError as exc:
        raise CliError(f"request to {url} failed: {type(exc).__name__}: {exc}") from exc


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[Any]:
    """An `oasr.client.OASRClient` for --url / --api-key; its errors become CliErrors."""
    from oasr import APIError, OASRClient, OASRError, ServerUnreachable

    url = args.url.rstrip("/")
    try:
        with OASRClient(url, api_key=_api_key(args), timeout=HTTP_TIMEOUT_S) as client:
            yield client
    except ServerUnreachable as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from exc
    except APIError as exc:
        raise CliError(f"HTTP {exc.status}: {exc.message}" if isinstance(exc.status, int) else str(exc)) from exc
    except OASRError as exc:
        raise CliError(str(exc)) from exc


def _check_files(paths: Sequence[str]) -> list[Path]:
    files = [Path(p) for p in paths]
    for f in files:
        if not f.is_file():
            raise CliError(f"no such file: {f}", EXIT_USAGE)
    return files
