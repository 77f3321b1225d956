"""The encoder on a second thread, beside the decoder (CPU).

The engine thread runs everything in order: an encoder batch, then decoder steps, then word
alignment. A decoder step is a hundred-odd small ops that keep one core busy (more threads only
add barriers), so while it decodes, the second core of a 2-core host idles, and while the encoder
runs, every live stream's decoding waits. Encoding the next windows on this thread while the
engine thread decodes the current ones keeps both cores on the model. Each side gets one intra-op
thread while both run; the encoder takes every thread again when it runs alone.

Only the model's forward runs here: the planner, the batch and every request's state stay on the
engine thread, which hands a batch over and takes its encodings back (`collect`). Where the
decoder's cross K/V projection is exact (int8: a window's K/V are bitwise the same projected alone
or in its prefill's batch), each window's K/V are projected here too, after its encoding: the
engine thread is the one that runs out of time at a live capacity's edge (16 sessions, 2-core
Xeon: it was busy ~90 % of the time, this thread ~55 %), and the projection was an eighth of it.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch import Tensor

from engine.models.whisper.context import ContextEncoder
from engine.models.whisper.window import WindowJob

CrossKV = tuple[list[Tensor], list[Tensor]]
"""A window's decoder cross K/V per layer (1, H, own positions, Dh)."""

logger = logging.getLogger(__name__)

THREADS_BESIDE_DECODER = 1  # intra-op threads while the encoder and the decoder run together


class EncoderThread:
    def __init__(self, context: ContextEncoder):
        self.context = context
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oasr-encoder")
        self._jobs: list[WindowJob] = []
        self._future: Future[tuple[list[Tensor], list[CrossKV | None]]] | None = None
        self._threads = torch.get_num_threads()

    @property
    def busy(self) -> bool:
        """A batch is being encoded (or its encodings wait to be collected)."""
        return self._future is not None

    def done(self) -> bool:
        return self._future is not None and self._future.done()

    def start(self, jobs: list[WindowJob]) -> None:
        """Encode `jobs` in one batch on this thread; the engine thread goes on decoding."""
        assert self._future is None, "one encoder batch at a time"
        self._threads = torch.get_num_threads()
        torch.set_num_threads(THREADS_BESIDE_DECODER)  # global: the decoder's steps take the other core
        self._jobs = jobs
        self._future = self._executor.submit(self._encode, [j.mel for j in jobs], [j.audio_positions for j in jobs])

    def _encode(self, mels: list[Tensor], positions: list[int]) -> tuple[list[Tensor], list[CrossKV | None]]:
        with torch.inference_mode():  # thread-local: the engine thread's mode does not reach here
            feats = self.context.encode(mels)
            decoder = self.context.decoder
            if not decoder.projects_cross_exactly:
                return feats, [None] * len(feats)
            return feats, [decoder.project_cross(f, n) for f, n in zip(feats, positions)]

    def collect(self) -> tuple[list[WindowJob], list[Tensor] | None, Exception | None]:
        """Wait for the batch in flight: its jobs (each with its cross K/V where they were
        projected here), and their encodings or the batch's error."""
        assert self._future is not None, "no encoder batch in flight"
        future, jobs = self._future, self._jobs
        try:
            feats, crosses = future.result()
            for job, cross in zip(jobs, crosses):
                job.cross_kv = cross
            return jobs, feats, None
        except Exception as exc:  # the engine thread retries the batch one window at a time
            return jobs, None, exc
        finally:
            self._future, self._jobs = None, []
            torch.set_num_threads(self._threads)

    def shutdown(self) -> None:
        """Wait for a batch in flight (its encodings are dropped) and stop the thread."""
        if self._future is not None:
            self.collect()
        self._executor.shutdown(wait=True)
