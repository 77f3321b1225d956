"""app/passing_thread.py: work handed to a thread that ends with it (model loads), so the OpenMP
pool that thread's torch ops started does not outlive the load."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.passing_thread import in_passing_thread


def test_the_result_comes_back_and_the_thread_has_ended() -> None:
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    async def main() -> int:
        return await in_passing_thread(work)

    assert asyncio.run(main()) == 42
    seen[0].join(timeout=5)
    assert seen[0] is not threading.main_thread() and not seen[0].is_alive()


def test_an_exception_is_raised_to_the_awaiting_coroutine() -> None:
    def work() -> int:
        raise ValueError("bad checkpoint")

    async def main() -> int:
        return await in_passing_thread(work)

    with pytest.raises(ValueError, match="bad checkpoint"):
        asyncio.run(main())
