"""API keys on gRPC calls: the metadata a client presents them in (as HTTP's headers)."""

from __future__ import annotations

import grpc


def presented_keys(context: grpc.aio.ServicerContext) -> list[str]:
    keys = []
    for key, value in context.invocation_metadata() or ():
        if not isinstance(value, str):
            continue
        if key == "authorization" and value.lower().startswith("bearer "):
            keys.append(value[7:].strip())
        elif key in ("x-api-key", "x-goog-api-key"):  # x-goog-api-key: Google's clients' `api_key`
            keys.append(value.strip())
    return keys
