"""Noticing a client that hung up while its request is still being recognized."""

from __future__ import annotations

from starlette.requests import Request


async def wait_for_disconnect(request: Request) -> None:
    """Return when the client disconnects. Call only after the body was read: from then on the
    ASGI server's next message is the disconnect, so this blocks without polling."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
