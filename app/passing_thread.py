"""Run torch work that uses every core (loading a model: quantizing, packing) on a thread that
ends with it.

OpenMP (libgomp, under torch's intra-op parallelism) keeps a pool of workers for every thread
that ran a parallel region, for as long as that thread lives, and once its pools together hold
more workers than the machine has cores it stops letting idle workers spin: each later parallel
region of any thread waits for its workers to wake. A model loaded on a long-lived thread (the
event loop's default executor) left the engine thread's two-thread decoder steps that slow: a
9-minute upload decoded in 11.0 s against 7.8 s with the engine in a process of its own
(benchmarks/long_form.py --server). A thread that has ended holds no pool.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


async def in_passing_thread(fn: Callable[[], T], name: str = "oasr-load") -> T:
    """`fn()` run on a new thread that ends when it returns; its result or exception."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the awaiting coroutine, raised there
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await asyncio.wrap_future(future)
