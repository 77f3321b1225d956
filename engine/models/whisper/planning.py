"""Which window jobs the encoder and the decoder batch take next.

Jobs wait in two queues: to be encoded, then (encoded) to join the running decoder batch with a
prefill. The planner decides when the encoder runs, which jobs share its batch and which join
the decoder, keeping live streams' final passes ahead of everything a client does not wait on.
It computes nothing itself: the runner runs the encoder and the batch on what it picks.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Container

from engine.models.whisper.batch import DecodeBatch
from engine.models.whisper.decoding import DecodeGroup
from engine.models.whisper.window import WindowJob, WindowResult

ENCODE_EVERY_STEPS = 32  # decoder steps after which waiting windows are encoded even mid-decode
LIVE_ENCODE_FRAMES = 2000
"""Mel frames of interim live passes encoded in one step (~0.2 s on 2 CPU cores): a larger batch
keeps the engine loop from starting the final pass of a stream whose audio just ended."""
OFFLINE_WINDOWS_BESIDE_LIVE = 1
"""Offline windows encoded in one step while live streams are open: a 30 s window costs about as
much as LIVE_ENCODE_FRAMES, so a final pass that arrives meanwhile waits for one window, not for a
batch of max_encode_batch (seconds on a CPU). Offline work yields to live streams (issue 35)."""
OFFLINE_PATIENCE_S = 2.0
"""Seconds an offline window waits behind live passes before it is encoded anyway, first in its
batch (one at a time): yielding to live streams must not starve offline work that admission
accepted, which counts on a share of the engine (app/backlog.py MAX_LIVE_SHARE). The scheduler's
starvation bound, max_wait_time, by default. Ahead of a final pass too, but at most once per
OFFLINE_PATIENCE_S: with as many live streams as the engine holds, a final is pending at almost
every step (measured in benchmarks/overload.py: no offline window done for 10 s stretches, accepted
uploads waiting 50 s against a 30 s estimate), so offline work is owed a floor, one window every
two seconds, that costs a waiting final one window's encode at most that often."""


class WindowPlanner:
    def __init__(self, max_rows: int, max_encode_batch: int, n_audio_ctx: int):
        """`max_rows`: decoder rows (beams × windows) in the batch; `max_encode_batch`: windows
        per encoder forward; `n_audio_ctx`: encoder positions of a full 30 s window."""
        self.max_rows = max_rows
        self.max_encode_batch = max_encode_batch
        self.n_audio_ctx = n_audio_ctx
        self.encode_queue: deque[WindowJob] = deque()
        self.prefill_queue: deque[WindowJob] = deque()
        self.deferred: list[tuple[WindowJob, WindowResult]] = []  # interim results held while finals decode
        self.encoding: list[WindowJob] = []  # handed to the encoder thread, not back yet
        self.steps_since_encode = 0
        self.offline_floor_at = -math.inf
        """Monotonic time an overdue offline window last went ahead of a final pass."""
        self.passes_late = 0
        """Interim live passes taken for encoding late (WindowJob.late), over the planner's life."""

    def has_work(self) -> bool:
        return bool(self.encode_queue or self.prefill_queue or self.deferred or self.encoding)

    def submit(self, job: WindowJob) -> None:
        """Queue a job: an encoded one (a retry of its window) waits to join the decoder; a live
        stream's final pass goes ahead of the other windows to encode (the client waits on it),
        an interim pass ahead of the offline windows (its stream's cadence does)."""
        job.queued_at = time.monotonic()
        if job.stream_request is not None:
            job.received_when_queued = job.stream_request.received_samples
        if job.audio_features is not None:
            self.prefill_queue.append(job)
        elif job.final:
            self.encode_queue.appendleft(job)
        elif job.live:
            first_offline = next((i for i, j in enumerate(self.encode_queue) if not j.live), len(self.encode_queue))
            self.encode_queue.insert(first_offline, job)
        else:
            self.encode_queue.append(job)

    def encoded(self, jobs: list[WindowJob]) -> None:
        self.prefill_queue.extend(jobs)

    def still_encoding(self, jobs: list[WindowJob]) -> list[bool]:
        """Which of `jobs`, back from the encoder thread, were not dropped meanwhile; all of them
        leave `encoding`."""
        wanted = [any(j is e for e in self.encoding) for j in jobs]
        self.encoding = [e for e in self.encoding if not any(e is j for j in jobs)]
        return wanted

    def drop(self, job: WindowJob) -> None:
        self.encoding = [j for j in self.encoding if j is not job]
        self.encode_queue = deque(j for j in self.encode_queue if j is not job)
        self.prefill_queue = deque(j for j in self.prefill_queue if j is not job)
        self.deferred = [(j, r) for j, r in self.deferred if j is not job]

    def drop_request(self, request_id: str) -> None:
        """Drop every job of a request (a long request's windows have owners of their own)."""
        self.encoding = [j for j in self.encoding if j.request_id != request_id]
        self.encode_queue = deque(j for j in self.encode_queue if j.request_id != request_id)
        self.prefill_queue = deque(j for j in self.prefill_queue if j.request_id != request_id)
        self.deferred = [(j, r) for j, r in self.deferred if j.request_id != request_id]

    def clear(self) -> None:
        self.encoding.clear()
        self.encode_queue.clear()
        self.prefill_queue.clear()
        self.deferred.clear()

    # ---- what runs next ----

    def interims_overdue(self) -> bool:
        """An interim pass waits to be encoded while its stream received a pass period of audio
        (WindowJob.overdue): the engine is behind its streams' cadence."""
        return any(j.overdue() for j in self.encode_queue)

    def finals_pending(self, batch: DecodeBatch) -> bool:
        """A live stream's final pass is encoded and waiting or decoding: a client waits on it."""
        return any(j.final for j in self.prefill_queue) or any(g.job.final for g in batch.groups if not g.done)

    def may_encode_beside(self, batch: DecodeBatch) -> bool:
        """Encode new live passes on the (free) encoder thread now: the decoder batch has live
        rows to step meanwhile, so the encoder delays no decoder step. Offline windows keep the
        engine thread's alternation (measured: the dev set took 11.6 s against 7.4 s when their
        windows were encoded beside the decoder, one thread each, instead of in batches of
        ENCODE_EVERY_STEPS with both threads)."""
        return (bool(batch.groups) and bool(self.encode_queue) and all(j.live for j in self.encode_queue)
                and all(g.job.live for g in batch.groups))

    def may_encode(self, batch: DecodeBatch) -> bool:
        """Encode new windows when the decoder batch has drained, or after ENCODE_EVERY_STEPS
        decoder steps. An encoder batch costs as much as dozens of decoder steps on a CPU, so
        encoding at every step would stretch each running decode to one token per encoder
        batch; alternating keeps passes short (live streams) and rows full (offline)."""
        if not batch.groups or self.steps_since_encode >= ENCODE_EVERY_STEPS:
            return True
        return self.final_first()

    def final_first(self) -> bool:
        """A live stream's final pass is next to encode: a client waits on it."""
        return bool(self.encode_queue) and self.encode_queue[0].final

    def take_encode(self, batch: DecodeBatch, live_streams: bool = False) -> list[WindowJob]:
        """The windows to encode together now, in queue order, within the decoder rows left; at
        most OFFLINE_WINDOWS_BESIDE_LIVE offline windows while `live_streams` are open."""
        budget = self.max_rows - batch.num_rows - sum(j.rows for j in self.prefill_queue)
        jobs: list[WindowJob] = []
        live_frames = 0
        offline_windows = 0
        if live_streams:
            now = time.monotonic()
            overdue = next((j for j in self.encode_queue if not j.live and now - j.queued_at >= OFFLINE_PATIENCE_S), None)
            ahead_of_final = self.final_first()
            if (overdue is not None and overdue.rows <= budget
                    and (not ahead_of_final or now - self.offline_floor_at >= OFFLINE_PATIENCE_S)):
                # it goes first; live passes (a final included) fill the rest
                self.encode_queue = deque(j for j in self.encode_queue if j is not overdue)
                jobs.append(overdue)
                budget -= overdue.rows
                offline_windows = 1
                if ahead_of_final:
                    self.offline_floor_at = now
        # a client waits on every final pass: no new interim pass is encoded with one or joins the
        # decoder until they are done
        final_waiting = self.finals_pending(batch)
        while self.encode_queue and len(jobs) < self.max_encode_batch and self.encode_queue[0].rows <= budget:
            job = self.encode_queue[0]
            if job.interim and job.audio_positions < self.n_audio_ctx:  # a short interim live pass
                if final_waiting:
                    for waiting in self.encode_queue:  # held back on purpose: no sign of load (WindowJob.late)
                        waiting.held_for_final = waiting.held_for_final or waiting.interim
                    break
                if live_frames and live_frames + job.mel.shape[1] > LIVE_ENCODE_FRAMES:
                    break
                live_frames += job.mel.shape[1]
            if not job.live:  # an offline window: after the finals, one at a time beside streams
                if live_streams and (final_waiting or offline_windows >= OFFLINE_WINDOWS_BESIDE_LIVE):
                    break
                offline_windows += 1
            self.encode_queue.popleft()
            budget -= job.rows
            jobs.append(job)
            final_waiting = final_waiting or job.final
        if jobs:
            self.steps_since_encode = 0
            now = time.monotonic()
            self.passes_late += sum(job.late(now) for job in jobs)
        return jobs

    def take_join(self, batch: DecodeBatch, active: Container[str]) -> list[WindowJob]:
        """The encoded windows to join the decoder batch now (of requests still `active`)."""
        budget = self.max_rows - batch.num_rows
        jobs: list[WindowJob] = []
        held: list[WindowJob] = []
        finals_first = self.finals_pending(batch)
        while self.prefill_queue and self.prefill_queue[0].rows <= budget:
            job = self.prefill_queue.popleft()
            if job.request_id not in active:
                continue
            if finals_first and job.interim:  # every decoder step it adds delays the finals
                held.append(job)
                continue
            budget -= job.rows
            jobs.append(job)
        self.prefill_queue.extendleft(reversed(held))
        return jobs

    def results(self, finished: list[DecodeGroup], batch: DecodeBatch) -> list[tuple[WindowJob, WindowResult]]:
        """The decoded windows to hand to their owners now. While finals are pending, interim
        passes wait (their word alignment can; the finals cannot)."""
        done = [(g.job, g.result) for g in finished if g.result is not None]
        if self.finals_pending(batch):
            self.deferred.extend((j, r) for j, r in done if j.interim)
            return [(j, r) for j, r in done if not j.interim]
        done, self.deferred = [*self.deferred, *done], []
        return done
