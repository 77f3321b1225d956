"""Running one job: its audio (spool or `file://` uri) -> decode -> one engine request per
channel (or the downmix), at the jobs' engine priority -> a LongRunningRecognizeResponse.

Progress is observed through the serving bridge: the offline Whisper decoder reports each
finished 30 s window as a partial output whose `duration` is the audio decoded so far, so
progress = decoded seconds / total seconds over all channels. Families that report no
partials offline jump from 0 to 100 % when they finish.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from app.audio import AudioDecoder, AudioError
from app.channels import waveforms
from app.engine_service import EngineService
from app.jobs.model import Job
from app.jobs.spec import JobCodec
from app.jobs.spool import Spool
from app.jobs.uri import resolve_audio_uri
from engine import RequestOutput
from engine.errors import EngineError, EngineShutdownError, InvalidRequestError

logger = logging.getLogger(__name__)

API = "jobs"


RPC_CODES = {"INVALID_ARGUMENT": 3, "NOT_FOUND": 5, "INTERNAL": 13}
"""The google.rpc.Code numbers a failed job is stored with (the gRPC status codes' values)."""


class JobFailed(Exception):
    """The job cannot succeed: `code` names the google.rpc.Code stored on the operation."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.code_value = RPC_CODES[code]
        self.message = message


class EngineGone(Exception):
    """The engine is shutting down: the job goes back to the queue."""


class EngineServices(Protocol):
    """The server's engines as jobs see them (app/model_pool.py's ModelPool has this shape)."""

    @property
    def draining(self) -> bool: ...

    @property
    def default_service(self) -> EngineService | None:
        """The first model's service while it is loaded."""
        ...

    async def service_for(self, model: str | None) -> EngineService:
        """The loaded service of the model a job names (ModelNotFound for one not served)."""
        ...


@dataclass(frozen=True)
class OneService:
    """`EngineServices` of a server with one engine that is always loaded."""

    service: EngineService

    @property
    def draining(self) -> bool:
        return self.service.admission.draining

    @property
    def default_service(self) -> EngineService | None:
        return self.service

    async def service_for(self, model: str | None) -> EngineService:
        return self.service


@dataclass(frozen=True)
class JobRuntime:
    """What running a job needs from the server."""

    services: EngineServices
    """The engine of each job's model (its RecognitionConfig.model)."""
    decoder: AudioDecoder
    spool: Spool
    audio_uri_root: str | None
    max_audio_seconds: float
    priority: int
    codec: JobCodec
    """The edge's reading of stored records and rendering of results (app/google/jobs.py)."""


def _read_audio(job: Job, runtime: JobRuntime) -> bytes:
    if job.audio_digest is not None:
        return runtime.spool.read(job.audio_digest)
    assert job.audio_uri is not None
    path: Path = resolve_audio_uri(job.audio_uri, runtime.audio_uri_root)
    return path.read_bytes()


async def recognize_job(job: Job, runtime: JobRuntime, on_progress: Callable[[int], Awaitable[None]]) -> bytes:
    """The job's result as its edge stores it (`JobCodec.result`). Raises JobFailed (the job
    fails), EngineGone (requeue), or CancelledError (stopped)."""
    try:
        spec = runtime.codec.spec(job.request)
        data = await asyncio.to_thread(_read_audio, job, runtime)
        separate = spec.separate_channels
        audio = await runtime.decoder.decode(data, encoding=spec.encoding, sample_rate=spec.sample_rate,
                                             channels=spec.channels, max_seconds=runtime.max_audio_seconds,
                                             keep_channels=separate)
    except InvalidRequestError as exc:  # the stored config no longer passes (a check added since)
        raise JobFailed("INVALID_ARGUMENT", str(exc)) from exc
    except AudioError as exc:
        raise JobFailed("INVALID_ARGUMENT", str(exc)) from exc
    except OSError as exc:  # the spooled file or the uri's file vanished
        raise JobFailed("NOT_FOUND", f"the job's audio cannot be read: {exc}") from exc
    except Exception as exc:
        if type(exc).__name__ == "InvalidJobError":  # the uri no longer resolves under the root
            raise JobFailed("INVALID_ARGUMENT", str(exc)) from exc
        raise
    channels = waveforms(audio, separate)
    try:
        service = await runtime.services.service_for(spec.model)
    except EngineShutdownError as exc:
        raise EngineGone(str(exc)) from exc
    except EngineError as exc:  # ModelNotFound: the model was served when the job was submitted
        raise JobFailed("NOT_FOUND", str(exc)) from exc
    outs = await _run_channels(service, runtime, channels, spec.options, on_progress)
    return runtime.codec.result(job, spec, outs, audio.duration)


async def _run_channels(service: EngineService, runtime: JobRuntime, channels: list[np.ndarray], options: object,
                        on_progress: Callable[[int], Awaitable[None]]) -> list[RequestOutput]:
    rate = service.sample_rate
    totals = [max(len(c) / rate, 1e-9) for c in channels]
    decoded = [0.0] * len(channels)
    streams = []
    try:
        try:
            for samples in channels:  # opened back to back: the engine sees them together and batches them
                streams.append(service.open_request(samples, decoding=options, priority=runtime.priority))  # type: ignore[arg-type]
        except EngineShutdownError as exc:
            raise EngineGone(str(exc)) from exc
        except EngineError as exc:
            raise JobFailed("INVALID_ARGUMENT", str(exc)) from exc
        for samples in channels:
            service.metrics.audio_seconds.labels(api=API, mode="offline").inc(len(samples) / rate)
        finals: list[RequestOutput | None] = [None] * len(channels)
        reported = 0
        while any(f is None for f in finals):
            waiting = {asyncio.ensure_future(s.get()): i for i, s in enumerate(streams) if finals[i] is None}
            try:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for fut in waiting:
                    if not fut.done():
                        fut.cancel()
            for fut in done:
                i = waiting[fut]
                out = fut.result()
                if out.finished:
                    finals[i] = out
                    decoded[i] = totals[i]
                else:
                    decoded[i] = min(out.progress_seconds, totals[i])
            percent = min(99, int(100 * sum(decoded) / sum(totals)))
            if percent > reported:
                reported = percent
                await on_progress(percent)
        results = [f for f in finals if f is not None]
        for out in results:
            if out.finish_reason == "error":
                if out.error_stage == "shutdown":
                    raise EngineGone(out.error or "shutdown")
                raise JobFailed("INTERNAL", f"recognition failed at {out.error_stage}: {out.error}")
        return results
    finally:
        for s in streams:
            service.close(s.request_id)  # aborts what still runs (cancel, lost lease, failure elsewhere)
