"""The start-up collection pause (app/startup_gc.py): it undoes only what it did, the server's
lifespan ends it once ready (also when start-up fails), and a frozen heap under the pause is
frozen without a collection pass."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from app import startup_gc
from engine import gc_freeze


@pytest.fixture(autouse=True)
def collection_restored() -> Iterator[None]:
    was_enabled = gc.isenabled()
    yield
    startup_gc.resume_collection()
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


def test_a_pause_is_undone_by_its_resume_only() -> None:
    gc.enable()
    assert startup_gc.pause_collection() is True
    assert not gc.isenabled() and startup_gc.collection_paused()
    assert startup_gc.pause_collection() is False  # already paused: a nested caller must not resume
    startup_gc.resume_collection()
    assert gc.isenabled() and not startup_gc.collection_paused()


def test_collection_disabled_by_someone_else_stays_disabled() -> None:
    gc.disable()
    assert startup_gc.pause_collection() is False
    startup_gc.resume_collection()
    assert not gc.isenabled()


def test_importing_the_server_module_leaves_collection_on() -> None:
    import app.main  # noqa: F401 - imported (again, or first) for its effect on the collector

    assert gc.isenabled() and not startup_gc.collection_paused()


def test_the_heap_freezes_without_a_pass_while_paused() -> None:
    gc.enable()
    startup_gc.pause_collection()
    passes: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(count)
    try:
        assert gc_freeze.freeze_heap()
        assert passes == []
        gc_freeze.thaw_heap()
        startup_gc.resume_collection()
        assert gc_freeze.freeze_heap()
        assert passes == [gc_freeze.YOUNG_GENERATIONS]  # collection on: the young generations first
        gc_freeze.thaw_heap()
    finally:
        gc.callbacks.remove(count)


def test_a_failed_start_up_still_resumes_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    import app.main

    async def fail(*_: object) -> None:
        assert startup_gc.collection_paused()  # the engines build under the pause
        raise RuntimeError("no engine")

    monkeypatch.setattr(app.main, "_start", fail)
    gc.enable()

    async def run() -> None:
        async with app.main.lifespan(app.main.app):
            pass

    with pytest.raises(RuntimeError, match="no engine"):
        asyncio.run(run())
    assert gc.isenabled() and not startup_gc.collection_paused()
