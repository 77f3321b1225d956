"""The reference design's convenience API over `ASREngine` (§7 usage): `run` drains the engine
and returns what finished; `transcribe_outputs` / `transcribe` / `transcribe_offline` submit
waveforms together (so they batch) and wait for their outputs. `ASREngine` keeps these names as
one-line methods; the waiting lives here.

They drive the engine from the caller's thread with `engine.loop.drive`, so they must not be used
while another thread drives the same engine (the server's engine thread does).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np

from engine.loop import IDLE_WAIT_S, LoopObserver, Steppable, drive
from engine.types import DecodingOptions, RequestOutput


class Waiters:
    """Futures of requests a caller waits on, resolved by the engine's update with their final
    output (or their abort at shutdown)."""

    def __init__(self) -> None:
        self._futures: dict[str, Future[RequestOutput]] = {}
        self._ids = itertools.count()

    def new(self) -> tuple[str, Future[RequestOutput]]:
        rid = f"tx-{next(self._ids)}-{uuid.uuid4().hex[:6]}"
        fut: Future[RequestOutput] = Future()
        self._futures[rid] = fut
        return rid, fut

    def forget(self, request_id: str) -> None:
        self._futures.pop(request_id, None)

    def resolve(self, out: RequestOutput) -> None:
        fut = self._futures.pop(out.request_id, None)
        if fut is not None and not fut.done():
            fut.set_result(out)


class ASREngine(Steppable, Protocol):
    """What this module uses of `engine.engine.ASREngine` (a Protocol: no import back up)."""

    waiters: Waiters
    num_unfinished: int

    def has_unfinished(self) -> bool: ...

    def add_request(self, audio: Any, streaming: bool = False, priority: int = 0,
                    decoding: DecodingOptions | None = None, request_id: str | None = None,
                    sample_rate: int | None = None) -> str: ...

    def abort_request(self, request_id: str) -> None: ...


class _Raise(LoopObserver):
    """The caller's own loop: a failed step propagates instead of failing the requests."""

    def step_failed(self, exc: Exception) -> None:
        raise exc


def run(engine: ASREngine, timeout: float | None = None) -> list[RequestOutput]:
    """See `ASREngine.run`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    finished: list[RequestOutput] = []

    def stop() -> bool:
        if not engine.has_unfinished():
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"run(): {engine.num_unfinished} request(s) still unfinished after {timeout} s")
        return False

    def keep(outputs: list[RequestOutput]) -> None:
        finished.extend(o for o in outputs if o.finished)

    wait = IDLE_WAIT_S if timeout is None else min(IDLE_WAIT_S, timeout)
    drive(engine, keep, stop=stop, observer=_Raise(), idle_wait_s=wait)
    return finished


def transcribe_outputs(engine: ASREngine, audio: np.ndarray | Sequence[np.ndarray], streaming: bool = False,
                       decoding: DecodingOptions | None = None, priority: int = 0,
                       sample_rate: int | None = None) -> list[RequestOutput]:
    """See `ASREngine.transcribe_outputs`."""
    if not isinstance(streaming, bool):
        raise TypeError(f"streaming must be a bool, got {type(streaming).__name__} (decoding is the third argument)")
    audios = [audio] if isinstance(audio, np.ndarray) else list(audio)
    futures: list[Future[RequestOutput]] = []
    submitted: list[str] = []
    try:
        for a in audios:
            rid, fut = engine.waiters.new()
            try:
                engine.add_request(a, streaming=streaming, priority=priority, decoding=decoding, request_id=rid,
                                   sample_rate=sample_rate)
            except Exception:
                engine.waiters.forget(rid)
                raise
            submitted.append(rid)
            futures.append(fut)
    except Exception:
        for rid in submitted:  # a bad waveform in the list: withdraw the ones already queued
            engine.waiters.forget(rid)
            engine.abort_request(rid)
        raise
    drive(engine, lambda _: None, stop=lambda: all(f.done() for f in futures), observer=_Raise())
    return [f.result() for f in futures]


def transcribe(engine: ASREngine, audio: np.ndarray | Sequence[np.ndarray], streaming: bool = False,
               decoding: DecodingOptions | None = None) -> str | list[str]:
    """See `ASREngine.transcribe`."""
    outs = transcribe_outputs(engine, audio, streaming=streaming, decoding=decoding)
    for o in outs:
        if o.finish_reason == "error":
            raise RuntimeError(f"request {o.request_id} failed at {o.error_stage}: {o.error}")
    texts = [o.text for o in outs]
    return texts[0] if isinstance(audio, np.ndarray) else texts


__all__ = ["Waiters", "run", "transcribe", "transcribe_outputs"]
