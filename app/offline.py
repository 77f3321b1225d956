"""Running one offline request for any surface: permit, engine request, timeout, cancellation
on disconnect, metrics — so every route and RPC behaves the same."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable

import numpy as np

from app.engine_service import EngineService
from app.errors import ApiError
from app.output_stream import OutputStream
from engine import DecodingOptions, RequestOutput


class RequestTimeout(ApiError):
    def __init__(self, seconds: float):
        super().__init__(408, f"request did not finish within {seconds:g} s (--request-timeout-secs)")


def take_permit(service: EngineService, *, live: bool = False) -> None:
    """Take an inflight permit or raise 503; the caller must `service.release()` it. Offline work
    is also refused while the backlog ahead of it would queue it past --max-queue-delay-secs:
    503 RESOURCE_EXHAUSTED with a Retry-After taken from the measured backlog. `live` work (a
    stream the engine advances as it arrives) is refused instead while the live streams already
    admitted take most of the engine's time (EngineService.shed_live), so they keep their cadence."""
    retry = service.shed_live() if live else service.shed_offline()
    if retry is not None:
        raise live_refusal(service, retry) if live else offline_refusal(service, retry)
    if not service.try_acquire(live=live):
        if service.draining:
            raise ApiError(503, "server is shutting down")  # UNAVAILABLE: go to another replica
        # over capacity is RESOURCE_EXHAUSTED (seed 001's table), still HTTP 503
        retry = service.backlog.drain_time()
        raise ApiError(503, f"server is at capacity (--max-inflight); retry after {retry} s",
                       status_name="RESOURCE_EXHAUSTED", retry_after=retry)


def offline_refusal(service: EngineService, retry: int) -> ApiError:
    """The refusal of new offline work whose queue delay is over the limit, or that live sessions
    leave no engine time to (503 RESOURCE_EXHAUSTED)."""
    delay = service.backlog.delay()
    if delay <= service.max_queue_delay_secs:  # refused for the live sessions, not for the queue
        why = "the live sessions admitted take the engine's time (they go first)"
    else:
        why = f"new work would wait about {delay:.0f} s (--max-queue-delay-secs {service.max_queue_delay_secs:g})"
    return ApiError(503, f"server is overloaded: {why}; retry after {retry} s",
                    status_name="RESOURCE_EXHAUSTED", retry_after=retry)


def live_refusal(service: EngineService, retry: int) -> ApiError:
    """The refusal of a new live session while admitted ones take the engine (503 RESOURCE_EXHAUSTED)."""
    share = service.projected_live_share()
    why = ("the live sessions admitted are behind their cadence already (the engine sheds their passes)"
           if service.backlog.live_behind() else
           f"live sessions would take {share:.0%} of the engine with a new one, which would slow those admitted")
    return ApiError(503, f"server is overloaded: {why}; retry after {retry} s",
                    status_name="RESOURCE_EXHAUSTED", retry_after=retry)


@contextlib.asynccontextmanager
async def inflight_permit(service: EngineService, *, live: bool = False) -> AsyncIterator[None]:
    take_permit(service, live=live)
    try:
        yield
    finally:
        service.release()


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
    metrics.count_offline_audio(api, len(audio) / service.engine.sample_rate)
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
