"""`oasr models`: list what a server serves."""

from __future__ import annotations

import argparse
import sys

from app.cli.common import EXIT_OK, CliError, _error_message, _http


def cmd_models(args: argparse.Namespace) -> int:
    with _http(args) as client:
        response = client.get("/v1/models")
    if response.status_code != 200:
        raise CliError(_error_message(response))
    for model in response.json().get("data", []):
        info = model.get("info") or {}
        details = " ".join(f"{k}={info[k]}" for k in ("family", "device", "service_mode") if k in info)
        sys.stdout.write(f"{model['id']}\t{details}\n")
    return EXIT_OK
