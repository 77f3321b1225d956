"""ASREngine: requests in, `RequestOutput`s out, one `step()` at a time.

`step()` is three verbs: schedule (admit waiting requests into the runner's free slots),
execute (the runner advances everything admitted by one batched step), update (finished
requests leave and their outputs are returned). Mutations from any thread (add, feed,
abort) are queued and applied together at the start of the next step, so the engine
state has exactly one owner: the thread that calls `step()`.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np

from engine import reference_api
from engine.admission import (
    check_audio,
    check_decode_method,
    check_duration,
    check_options,
    check_streaming,
    load_runner,
    model_card,
)
from engine.config import EngineConfig
from engine.gc_freeze import freeze_heap, thaw_heap
from engine.hub import checkpoint_dir
from engine.metrics import EngineMetrics
from engine.ops.extension import extension_status
from engine.request import Request, RequestStatus, error_output
from engine.request_ids import RequestIds
from engine.runner import ModelInfo, ModelRunner
from engine.scheduler import Scheduler, SchedulerOutput, WaitingRequest
from engine.types import AbortRequest, AddRequest, Command, DecodingOptions, FeedAudio, RequestOutput, Samples

logger = logging.getLogger(__name__)


class ASREngine:
    """Thread-safe front of one model runner. See the module docstring for the step loop; one
    thread drives it (`engine.loop.drive`), any thread may add, feed and abort."""

    def __init__(self, config: EngineConfig | None = None, runner: ModelRunner | None = None):
        self.config = config or EngineConfig()
        self.config.validate()
        if runner is None and self.config.ckpt_dir is not None:  # a model name: download it, or find it cached
            self.config = dataclasses.replace(self.config, ckpt_dir=checkpoint_dir(self.config.ckpt_dir,
                                                                                   self.config.revision))
        self.kernels = extension_status()  # logs once which path the operators take
        if self.config.num_threads:
            import torch

            torch.set_num_threads(self.config.num_threads)
        self.runner = runner or load_runner(self.config)
        self.model_info: ModelInfo = self.runner.info()
        """What the loaded model is and can do (typed; `info()` is its JSON card)."""
        self.family = self.model_info.family
        self.sample_rate = self.runner.sample_rate
        check_decode_method(self.runner, self.model_info, self.config.decode_method)
        self.scheduler = Scheduler.from_config(self.config)
        self._inbox: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
        self._peeked: list[Command | None] = []  # taken by wait_for_work, applied first by step
        self._requests: dict[str, Request] = {}
        self._waiting: list[Request] = []
        self._ids = RequestIds()  # accepted and not yet finished; claimed and checked from any thread
        self.waiters = reference_api.Waiters()
        """Callers of `transcribe*` waiting on their requests' final outputs."""
        self.metrics = EngineMetrics()
        """Engine-side counters and samples; the serving layer drains them after each step."""
        self._admit_hold_until: float | None = None
        """preferred_batch_size held every waiting request back until this monotonic time (or
        until a command arrives or the runner's free slots change)."""
        self._admit_hold_free = 0
        self.last_schedule: SchedulerOutput | None = None
        """The scheduler's last decision (admitted ids, policy, padding) for metrics."""
        self._heap_frozen = self.config.gc_freeze and freeze_heap()

    # ------------------------------------------------------------------ facts

    @property
    def streaming_enabled(self) -> bool:
        return self.config.service_mode == "streaming" and self.runner.supports_streaming

    def info(self) -> dict[str, Any]:
        """The JSON model card `/v1/models` shows: the model's facts (its `details` merged in) and
        how this engine serves it. Holds no file-system path."""
        return model_card(self.model_info, service_mode=self.config.service_mode,
                          streaming_enabled=self.streaming_enabled, kernels=self.kernels.as_info())

    @property
    def num_running(self) -> int:
        return sum(1 for r in self._requests.values() if r.status == RequestStatus.RUNNING)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def has_unfinished(self) -> bool:
        return self.num_unfinished > 0

    @property
    def num_unfinished(self) -> int:
        """Requests accepted and not yet finished (any thread may read)."""
        return len(self._ids)

    # --------------------------------------------------------------- mutations

    def validate_options(self, decoding: DecodingOptions | None, streaming: bool = False) -> DecodingOptions:
        """The options a request would be admitted with, or InvalidRequestError / UnsupportedError
        (ranges, the model's capabilities, the family's checks: engine/admission.py)."""
        return check_options(self.runner, self.model_info, decoding, streaming)

    def validate_audio(self, audio: Any, sample_rate: int | None = None, allow_empty: bool = False) -> Samples:
        """Return `audio` as a contiguous float32 mono array, or raise InvalidRequestError."""
        return check_audio(audio, self.sample_rate, sample_rate, allow_empty)

    def add_request(self, audio: Any, streaming: bool = False, priority: int = 0,
                    decoding: DecodingOptions | None = None, request_id: str | None = None,
                    sample_rate: int | None = None) -> str:
        """Queue a request with all of its audio attached; returns its id.

        `streaming=False` decodes it in one offline pass. `streaming=True` runs the streaming path
        (partials, then one final): the engine releases the audio to the stream one chunk per
        step, as if it arrived live. Real-time clients use `add_streaming_request` + `feed_chunk`.
        `priority`: lower is sooner."""
        if streaming:
            samples = self.validate_audio(audio, sample_rate, allow_empty=True)
            rid = self.add_streaming_request(priority=priority, decoding=decoding, request_id=request_id)
            self._inbox.put(FeedAudio(rid, samples, is_last=True, attached=True))
            return rid
        samples = self.validate_audio(audio, sample_rate)
        options = self.validate_options(decoding, streaming=False)
        check_duration(self.runner, samples.size / self.sample_rate, options)
        rid = self._ids.claim(request_id)
        self._inbox.put(AddRequest(rid, samples, streaming=False, priority=priority, decoding=options))
        return rid

    def add_streaming_request(self, priority: int = 0, decoding: DecodingOptions | None = None,
                              request_id: str | None = None) -> str:
        """Open a live stream; audio follows through `feed_chunk`. Refused by an engine whose
        `service_mode` is 'offline' (it builds no streaming runtime)."""
        check_streaming(self.config.service_mode, self.runner, self.family)
        options = self.validate_options(decoding, streaming=True)
        rid = self._ids.claim(request_id)
        self._inbox.put(AddRequest(rid, None, streaming=True, priority=priority, decoding=options))
        return rid

    def feed_chunk(self, request_id: str, chunk: Any, is_last: bool = False, sample_rate: int | None = None) -> None:
        samples = self.validate_audio(chunk, sample_rate, allow_empty=True)
        self._ids.check(request_id)
        self._inbox.put(FeedAudio(request_id, samples, is_last))

    def abort_request(self, request_id: str) -> None:
        """Cancel a request; it finishes with finish_reason='abort' at the next step."""
        self._ids.check(request_id)
        self._inbox.put(AbortRequest(request_id))

    # -------------------------------------------------------------------- step

    def has_work(self) -> bool:
        """Whether `step()` would make progress now. Waiting requests count only when the runner
        has room for them, so a full engine whose streams await audio reads as idle."""
        if self._peeked or not self._inbox.empty() or self.runner.has_work():
            return True
        if any(r.attached_audio is not None and r.status == RequestStatus.RUNNING for r in self._requests.values()):
            return True
        if self._admit_hold_until is not None:
            if time.monotonic() < self._admit_hold_until and self.runner.free_slots() == self._admit_hold_free:
                return False  # preferred_batch_size holds the waiting requests until then
            self._admit_hold_until = None
        return bool(self._waiting) and self.runner.free_slots() > 0

    def wake(self) -> None:
        """Return a blocked `wait_for_work` at once (a driver about to stop)."""
        self._inbox.put(None)

    def wait_for_work(self, timeout: float | None = None) -> bool:
        """Block until a command arrives (or `timeout`) when there is nothing to do; no polling."""
        if self.has_work():
            return True
        if self._admit_hold_until is not None:  # wake when the held requests may go anyway
            until_hold = max(0.0, self._admit_hold_until - time.monotonic())
            timeout = until_hold if timeout is None else min(timeout, until_hold)
        try:
            cmd = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return False
        self._peeked.append(cmd)  # applied first by the next step, so per-request order holds
        return True

    def step(self) -> list[RequestOutput]:
        """Schedule, execute, update. Only the thread that drives the engine calls it."""
        outputs = self._apply_commands()
        outputs += self._schedule()
        self._release_attached_audio()
        if self.runner.has_work():
            with self.metrics.active():
                outputs += self.runner.execute()
            if self.runner.streams_stepped:  # the rows of a streaming batch: streams advanced together
                self.metrics.observe_batch("streaming", self.runner.streams_stepped)
        return self._update(outputs)

    def _apply_commands(self) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        while True:
            if self._peeked:
                cmd = self._peeked.pop(0)
            else:
                try:
                    cmd = self._inbox.get_nowait()
                except queue.Empty:
                    break
            if cmd is None:
                continue
            self._admit_hold_until = None  # new work may fill a preferred batch size sooner
            if isinstance(cmd, AddRequest):
                req = Request(
                    request_id=cmd.request_id,
                    streaming=cmd.streaming,
                    decoding=cmd.decoding or DecodingOptions(),
                    sample_rate=self.sample_rate,
                    priority=cmd.priority,
                    audio=cmd.audio,
                )
                self._requests[req.request_id] = req
                self._waiting.append(req)
            elif isinstance(cmd, FeedAudio):
                req = self._requests.get(cmd.request_id)
                if req is None or req.input_finished:
                    continue  # finished meanwhile (abort, error): late audio is dropped
                self.metrics.count_audio(cmd.chunk.size / self.sample_rate)
                if cmd.attached:
                    if cmd.chunk.size:
                        req.attached_audio = cmd.chunk
                    else:
                        req.attached_audio, req.input_finished = None, True
                    continue
                req.append_audio(cmd.chunk)
                if cmd.is_last:
                    req.input_finished = True
            elif isinstance(cmd, AbortRequest):
                req = self._requests.get(cmd.request_id)
                if req is not None:
                    outputs.append(self._abort(req))
        return outputs

    def _release_attached_audio(self) -> None:
        """One stream chunk of attached audio per running stream per step (see `add_request`)."""
        for req in self._requests.values():
            if req.attached_audio is not None and req.status == RequestStatus.RUNNING:
                req.release_attached(self.runner.stream_chunk_samples)

    def _abort(self, req: Request) -> RequestOutput:
        if req.status == RequestStatus.RUNNING:
            self.runner.release(req)
        elif req in self._waiting:
            self._waiting.remove(req)
        return RequestOutput(request_id=req.request_id, finished=True, finish_reason="abort",
                             duration=req.duration)

    def _schedule(self) -> list[RequestOutput]:
        candidates = list(self._waiting)
        if not candidates:
            return []
        free = self.runner.free_slots()
        if free <= 0:
            return []
        by_id = {r.request_id: r for r in candidates}
        now = time.monotonic()
        decision = self.scheduler.schedule(
            # a waiting stream has consumed nothing: its duration is the audio it has buffered
            [WaitingRequest(r.request_id, r.duration, r.arrival_time, r.priority, r.streaming) for r in candidates],
            free,
            now,
        )
        self.last_schedule = decision
        admitted = [by_id[rid] for rid in decision.admitted]
        if not admitted:
            if decision.next_admit_time is not None:
                self._admit_hold_until, self._admit_hold_free = decision.next_admit_time, free
            return []
        outputs: list[RequestOutput] = []
        empty = [r for r in admitted if not r.streaming and (r.audio is None or r.audio.size == 0)]
        for r in empty:  # a stream closed without audio: nothing to transcribe
            outputs.append(RequestOutput(request_id=r.request_id, finished=True, finish_reason="stop"))
        admitted = [r for r in admitted if r not in empty]
        for r in admitted + empty:
            self._waiting.remove(r)
            r.status = RequestStatus.RUNNING
            r.first_scheduled_time = now
        self.metrics.observe_admission(admitted, decision.padded_length, decision.useful_length, now)
        if admitted:
            with self.metrics.stage("streaming.allocate") if any(r.streaming for r in admitted) else nullcontext():
                outputs += self.runner.admit(admitted)
        return outputs

    def _update(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        self.metrics.count_outputs(len(outputs))
        for out in outputs:
            if not out.finished:
                continue
            self.metrics.count_finished(len(out.tokens), out.search_overflow)
            if out.search_overflow:
                logger.warning("request %s: the decoder's search overflowed; the transcript may miss words",
                               out.request_id)
            req = self._requests.pop(out.request_id, None)
            if req is not None:
                req.status = RequestStatus.FINISHED
                if req in self._waiting:
                    self._waiting.remove(req)
            self._ids.discard(out.request_id)
            self.waiters.resolve(out)
        return outputs

    def fail_all(self, error: str, stage: str = "engine") -> list[RequestOutput]:
        """End every request with an error output (after a step failure left the state unknown)."""
        self._apply_commands()
        outputs = []
        for req in list(self._requests.values()):
            if req.status == RequestStatus.RUNNING:
                try:
                    self.runner.release(req)
                except Exception:  # the runner is already in trouble; the request ends anyway
                    logger.exception("release of %s failed", req.request_id)
            outputs.append(error_output(req, stage, error))
        self._waiting.clear()
        return self._update(outputs)

    # ------------------------------------------------ the reference convenience API (engine/reference_api.py)

    def run(self, timeout: float | None = None) -> list[RequestOutput]:
        """Step until no request is unfinished; the finished outputs, in the order they finished
        (feed streams their last chunk first). TimeoutError past `timeout` seconds."""
        return reference_api.run(self, timeout)

    def transcribe_outputs(self, audio: np.ndarray | Sequence[np.ndarray], streaming: bool = False,
                           decoding: DecodingOptions | None = None, priority: int = 0,
                           sample_rate: int | None = None) -> list[RequestOutput]:
        """One finished RequestOutput per waveform, in input order, submitted together so they batch;
        `streaming=True` runs the streaming path with all audio attached."""
        return reference_api.transcribe_outputs(self, audio, streaming, decoding, priority, sample_rate)

    def transcribe_offline(self, audio: np.ndarray | Sequence[np.ndarray],
                           decoding: DecodingOptions | None = None) -> str | list[str]:
        """Offline transcription whatever the service mode: a str for one waveform, a list for a list."""
        return reference_api.transcribe(self, audio, streaming=False, decoding=decoding)

    def transcribe(self, audio: np.ndarray | Sequence[np.ndarray], streaming: bool = False,
                   decoding: DecodingOptions | None = None) -> str | list[str]:
        """Transcript text (a str for one waveform, a list for a list); a failed request raises RuntimeError."""
        return reference_api.transcribe(self, audio, streaming=streaming, decoding=decoding)

    def shutdown(self) -> None:
        """Refuse new requests, abort what is left, free the runner. Idempotent. Call it from the
        thread that drives the engine, or after that thread has stopped (`wake()` first)."""
        if not self._ids.close():
            return
        self._apply_commands()  # requests still in the inbox are aborted too
        for req in list(self._requests.values()):
            self.waiters.resolve(self._abort(req))
        self._requests.clear()
        self._waiting.clear()
        self._ids.clear()
        self.runner.shutdown()
        if self._heap_frozen:
            thaw_heap()
            self._heap_frozen = False


__all__ = ["ASREngine"]
