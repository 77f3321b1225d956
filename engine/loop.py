"""The one loop that drives an engine: block on its inbox while idle, `step()` while there is
work, hand every step's outputs on.

The server's engine thread, `ASREngine.run`/`transcribe*`, asrbench's in-process backend and the
capacity benchmarks all drive the engine through `drive`, so the idle wait, the handling of a
failed step and the order of outputs are the same everywhere.

    drive(engine, deliver=route, stop=stop_event.is_set)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from engine.types import RequestOutput

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5
"""Longest the loop blocks on an idle engine's inbox before it looks at `stop` again (and tells
the observer it is alive). Commands wake it at once; this only bounds how late a stop is seen."""


class Steppable(Protocol):
    """What `drive` needs of an engine (ASREngine, or a wrapper of it)."""

    def wait_for_work(self, timeout: float | None = None) -> bool: ...

    def step(self) -> list[RequestOutput]: ...

    def fail_all(self, error: str, stage: str = "engine") -> list[RequestOutput]: ...


class LoopObserver:
    """Hooks a driver may override; the defaults do nothing (and a failed step ends its requests
    with an error output through `fail_all`)."""

    def idle(self) -> None:
        """The inbox stayed empty for `idle_wait_s`."""

    def step_started(self) -> None:
        """A step is about to run."""

    def step_failed(self, exc: Exception) -> None:
        """`step()` raised; re-raise to stop the loop, return to fail every request in flight."""
        logger.exception("engine step failed", exc_info=exc)

    def stepped(self, seconds: float, failed: bool) -> None:
        """A step (or its failure handling) took `seconds`."""


def drive(engine: Steppable, deliver: Callable[[list[RequestOutput]], bool | None], *,
          stop: Callable[[], bool], observer: LoopObserver | None = None,
          idle_wait_s: float = IDLE_WAIT_S) -> None:
    """Step `engine` until `stop()` is true (checked before every wait and step) or `deliver`
    returns False. `deliver` gets each step's outputs, in the order the step produced them."""
    watch = observer or LoopObserver()
    while not stop():
        if not engine.wait_for_work(timeout=idle_wait_s):
            watch.idle()
            continue
        watch.step_started()
        started = time.perf_counter()
        failed = False
        try:
            outputs = engine.step()
        except Exception as exc:
            failed = True
            watch.step_failed(exc)  # may re-raise
            outputs = engine.fail_all(f"engine step failed: {exc}")
        watch.stepped(time.perf_counter() - started, failed)
        if deliver(outputs) is False:
            return


__all__ = ["IDLE_WAIT_S", "LoopObserver", "Steppable", "drive"]
