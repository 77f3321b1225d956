"""Per-channel recognition (Google's `enableSeparateRecognitionPerChannel`): each channel of a
recording is its own engine request, all submitted at once so the engine batches them, and
each result carries its `channel_tag` (1, 2, ...). Without the flag channels are mixed down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

import numpy as np

from app.audio import DecodedAudio
from app.engine_service import EngineService
from app.offline import run_offline
from engine import DecodingOptions, RequestOutput


def waveforms(audio: DecodedAudio, separate: bool) -> list[np.ndarray]:
    """What to recognize: every channel alone (per-channel), else the downmix."""
    return list(audio.channels) if separate and audio.channels else [audio.samples]


def channel_tags(count: int, separate: bool) -> list[int]:
    """Google numbers channels from 1; 0 means 'no channel' (mixed down)."""
    return list(range(1, count + 1)) if separate else [0] * count


async def run_offline_channels(
    service: EngineService,
    channels: Sequence[np.ndarray],
    options: DecodingOptions,
    *,
    api: str,
    timeout: float,
    disconnected: Awaitable[object] | None = None,
) -> list[RequestOutput]:
    """`run_offline` on every channel at once; the first failure cancels the others (each
    aborts its engine request), and a client disconnect ends them all."""
    if len(channels) == 1:
        return [await run_offline(service, channels[0], options, api=api, timeout=timeout, disconnected=disconnected)]
    tasks = [asyncio.ensure_future(run_offline(service, ch, options, api=api, timeout=timeout)) for ch in channels]
    gone = asyncio.ensure_future(disconnected) if disconnected is not None else None
    try:
        pending: set[asyncio.Future[Any]] = set(tasks)
        if gone is not None:
            pending.add(gone)
        while any(not t.done() for t in tasks):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if gone is not None and gone in done:
                from app.errors import ApiError

                raise ApiError(499, "client disconnected")
            for t in done:
                if t is not gone and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        return [t.result() for t in tasks]
    finally:
        for t in [*tasks, *([gone] if gone is not None else [])]:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
