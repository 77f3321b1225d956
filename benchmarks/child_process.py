"""A peer system run in a child process of the benchmark, asked over a pipe.

faster-whisper bundles its own OpenMP runtime; in the benchmark's process its threads made the
engine's two-thread ops wait longer to start (a 512 x 384 add on 2 threads 13 -> 89 us once it
had run), which no deployment of either has. So the peer runs in a process of its own and times
itself there.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


def start_worker(target: Callable[..., None], *args: Any) -> tuple[Callable[[Any], Any], Callable[[], None]]:
    """Start `target(connection, *args)` in a spawned child; it answers each message it receives
    until it receives None. Returns `ask(message) -> answer` and `close()`."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    worker = context.Process(target=target, args=(child, *args), daemon=True)
    worker.start()

    def ask(message: Any) -> Any:
        parent.send(message)
        return parent.recv()

    def close() -> None:
        parent.send(None)
        worker.join(timeout=30)

    return ask, close


__all__ = ["start_worker"]
