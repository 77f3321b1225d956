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
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def in_passing_thread(fn: Callable[[], T], name: str = "oasr-load") -> T:
    """`fn()` run on a new thread that ends when it returns; its result or exception."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (fn(), None)
        except BaseException as exc:  # handed to the awaiting coroutine, raised there
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody awaits it
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await done
