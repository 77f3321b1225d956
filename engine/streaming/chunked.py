"""The skeleton every chunked-stream runner shares (NeMo, Zipformer, WeNet, Paraformer-online):
the job table, release and shutdown, stats, the step's pick, finishing and failing a job.

Per `execute()`:
1. featurize (hook): audio queued since the last step becomes each job's features;
2. before the streams (hook, optional): whatever the family runs outside the chunk path (an
   offline batch) or settles first (streams whose input ran out);
3. pick: of the jobs with a chunk ready (hook), the scheduler's `pick_streams` takes the least
   recently advanced first, up to `max_batch_size` (torch-free, tested once in test_scheduler);
4. run (hook): the picked jobs advance together; the family returns their partial or final
   outputs, through `_finish` (final output hook, then release) and `_fail`.

A family's job is any object with the request it serves and the step it last advanced at.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Generic, Protocol, TypeVar

import numpy as np
import torch

from engine.config import EngineConfig
from engine.metrics import stage_timer
from engine.request import Request, error_output
from engine.runner import RunnerStats
from engine.scheduler import pick_streams
from engine.types import FinishReason, RequestOutput

logger = logging.getLogger(__name__)

__all__ = ["ChunkedStreamRunner", "StreamJob"]


class StreamJob(Protocol):
    """What the skeleton reads of a family's per-request state."""

    request: Request
    last_advanced: int
    """The runner step at which this job last advanced (-1: never); the pick's fairness key."""


J = TypeVar("J", bound=StreamJob)
X = TypeVar("X")
F = TypeVar("F")


class ChunkedStreamRunner(ABC, Generic[J]):
    """Holds admitted jobs by request id and runs the step; the family supplies the hooks."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._jobs: dict[str, J] = {}
        self._step = 0
        self.streams_stepped = 0
        """Live streams whose chunk forward ran together in the last `execute()`."""

    # ---- the job table ----

    def _register(self, job: J) -> None:
        """Hold `job` as its request's runner state (admitted)."""
        job.request.runner_state = job
        self._jobs[job.request.request_id] = job

    def release(self, request: Request) -> None:
        job = self._jobs.pop(request.request_id, None)
        if job is None:
            return
        self._free(job)
        request.runner_state = None

    def shutdown(self) -> None:
        for job in list(self._jobs.values()):
            self.release(job.request)

    def stats(self) -> RunnerStats:
        live = sum(1 for j in self._jobs.values() if j.request.streaming)
        return replace(self._cache_stats(), streams=live)

    # ---- one engine step ----

    def execute(self) -> list[RequestOutput]:
        self._step += 1
        outputs: list[RequestOutput] = []
        with stage_timer("streaming.features"):
            self._featurize(outputs)
        outputs += self._before_streams()
        ready = [j for j in self._jobs.values() if self._ready(j)]
        batch = [ready[i] for i in pick_streams([j.last_advanced for j in ready], self.config.max_batch_size)]
        self.streams_stepped = sum(1 for j in batch if j.request.streaming)
        if batch:
            outputs += self._run_streams(batch)
        return outputs

    def _finish(self, job: J, reason: FinishReason) -> RequestOutput:
        """The job's final output, then its state released; a failure to build it fails the job."""
        try:
            out = self._final_output(job, reason)
        except Exception as exc:
            logger.exception("output failed for request %s", job.request.request_id)
            return self._fail(job, "postprocess", exc)
        self.release(job.request)
        return out

    def _fail(self, job: J, stage: str, exc: Exception) -> RequestOutput:
        self.release(job.request)
        return error_output(job.request, stage, exc)

    # ---- featurizing, for the hook ----

    def _samples(self, job: J, audio: np.ndarray, outputs: list[RequestOutput]) -> torch.Tensor | None:
        """`audio` as a float32 tensor of its own (inputs may be read-only), or None after failing
        the job ('features') when it is not mono 1-D samples."""
        try:
            if audio.ndim != 1:
                raise ValueError(f"expected mono 1-D audio, got shape {audio.shape}")
            return torch.tensor(audio, dtype=torch.float32)
        except (ValueError, TypeError, RuntimeError) as exc:
            outputs.append(self._fail(job, "features", exc))
            return None

    def _features(self, jobs: list[J], inputs: list[X], compute: Callable[[list[X]], Sequence[F]],
                  outputs: list[RequestOutput]) -> list[tuple[J, F]]:  # fmt: skip
        """Each job's new features from one batched call over `inputs` (one per job); when it
        fails, every one of them fails ('features') and none is returned."""
        if not jobs:
            return []
        try:
            feats = compute(inputs)
        except Exception as exc:
            logger.exception("features failed for %d streams", len(jobs))
            outputs.extend(self._fail(j, "features", exc) for j in jobs)
            return []
        return list(zip(jobs, feats, strict=True))

    # ---- hooks ----

    @abstractmethod
    def _featurize(self, outputs: list[RequestOutput]) -> None:
        """Turn each job's queued audio into features; append the outputs of jobs that fail."""

    def _before_streams(self) -> list[RequestOutput]:
        """Work of the step that runs before the picked streams (an offline batch, streams that
        end without another chunk); their outputs come first."""
        return []

    @abstractmethod
    def _ready(self, job: J) -> bool:
        """Whether `job` has a chunk to run this step (whole, or the last one of its input)."""

    @abstractmethod
    def _run_streams(self, batch: list[J]) -> list[RequestOutput]:
        """Advance the picked jobs together by one chunk; a partial or final output for each."""

    @abstractmethod
    def _final_output(self, job: J, reason: FinishReason) -> RequestOutput:
        """The job's finished `RequestOutput` (the skeleton releases the job after it)."""

    def _free(self, job: J) -> None:
        """Give back what the job holds beyond the table (KV blocks, state slots)."""

    def _cache_stats(self) -> RunnerStats:
        """The family's pool and slot gauges (`streams` is counted here)."""
        return RunnerStats()
