"""Free TCP ports for servers a test starts. Ports asked for together are bound together before
any is released: the kernel hands out a port again as soon as its socket closes, so two calls
one after the other can return the same port (a server's HTTP and gRPC listeners then collide,
and the one started second exits with 'address already in use')."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int, avoid: tuple[int, ...] = ()) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 just now, none of them in `avoid`."""
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        while len(ports) < count:
            s = held.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in avoid:  # `avoid`'s ports are not held here: one may come back; ask again
                ports.append(port)
        return ports
