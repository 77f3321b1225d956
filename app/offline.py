"""Running one offline request for any surface: engine request, timeout, cancellation on
disconnect, metrics — so every route and RPC behaves the same (its permit: app/admission.py)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable

import numpy as np

from app.engine_service import EngineService
from app.errors import ApiError
from app.output_stream import OutputStream
from engine import DecodingOptions, RequestOutput


class RequestTimeout(ApiError):
    def __init__(self, seconds: float):
        super().__init__(408, f"request did not finish within {seconds:g} s (--request-timeout-secs)")


async def run_offline(
    service: EngineService,
    audio: np.ndarray,
    options: DecodingOptions,
    *,
    api: str,
    timeout: float,
    disconnected: Awaitable[object] | None = None,
) -> RequestOutput:
    """Submit, wait for the final output, and always leave the engine clean: a timeout, a
    disconnect or a cancellation aborts the engine request. Errors map to ApiError."""
    metrics = service.metrics
    started = time.monotonic()
    # counted before the submit: audio the engine refuses still reaches the throughput denominator
    metrics.count_offline_audio(api, len(audio) / service.sample_rate)
    try:
        stream = service.open_request(audio, decoding=options)
    except BaseException:
        if inspect.iscoroutine(disconnected):
            disconnected.close()  # never awaited now; closing it avoids a "never awaited" warning
        raise
    outcome = "error"  # a timeout and a draining server's 503 too: the server's problem to see
    try:
        out = await _await_final(stream, timeout, disconnected)
        if out is None:
            outcome = "cancelled"
            service.series.requests_cancelled.inc()
            raise ApiError(499, "client disconnected")
        if out.finish_reason == "error":
            if out.error_stage == "shutdown":
                raise ApiError(503, "server is shutting down; the request was cancelled")
            raise ApiError(500, f"recognition failed at {out.error_stage}: {out.error}")
        outcome = "cancelled" if out.finish_reason == "abort" else "ok"
        return out
    except asyncio.CancelledError:
        outcome = "cancelled"
        service.series.requests_cancelled.inc()
        raise
    finally:
        service.close(stream.request_id)
        metrics.request_duration.labels(api=api, mode="offline", outcome=outcome).observe(time.monotonic() - started)


async def _await_final(
    stream: OutputStream, timeout: float, disconnected: Awaitable[object] | None
) -> RequestOutput | None:
    final = asyncio.ensure_future(stream.final())
    waiters: set[asyncio.Future[object]] = {final}  # type: ignore[arg-type]
    gone = asyncio.ensure_future(disconnected) if disconnected is not None else None
    if gone is not None:
        waiters.add(gone)
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if final in done:
            return final.result()
        if gone is not None and gone in done:
            return None
        raise RequestTimeout(timeout)
    finally:
        for w in waiters:
            if not w.done():
                w.cancel()
