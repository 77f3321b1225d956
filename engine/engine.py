"""ASREngine: requests in, `RequestOutput`s out, one `step()` at a time.

`step()` is three verbs: schedule (admit waiting requests into the runner's free slots),
execute (the runner advances everything admitted by one batched step), update (finished
requests leave and their outputs are returned). Mutations from any thread (add, feed,
abort) are queued and applied together at the start of the next step, so the engine
state has exactly one owner: the thread that calls `step()`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from contextlib import nullcontext
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.errors import EngineShutdownError, InvalidRequestError, UnknownRequestError, UnsupportedError
from engine.families import check_quantization, family_options, resolve_family
from engine.gc_freeze import freeze_heap, thaw_heap
from engine.metrics import EngineMetrics
from engine.ops.extension import extension_status
from engine.request import Request, RequestStatus
from engine.runner import ModelInfo, ModelRunner
from engine.scheduler import Scheduler, SchedulerOutput, WaitingRequest
from engine.types import AbortRequest, AddRequest, Command, DecodingOptions, FeedAudio, RequestOutput

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5
"""Longest a driving loop blocks on the inbox before re-checking its stop flag or deadline."""

class ASREngine:
    """Thread-safe front of one model runner. See the module docstring for the step loop."""

    def __init__(self, config: EngineConfig | None = None, runner: ModelRunner | None = None):
        self.config = config or EngineConfig()
        self.config.validate()
        self.kernels = extension_status()  # logs once which path the operators take
        if self.config.num_threads:
            import torch

            torch.set_num_threads(self.config.num_threads)
        if runner is None:
            family = resolve_family(self.config.resolved_ckpt_dir(), self.config.checkpoint_name)
            check_quantization(family, self.config)
            runner = family.build(self.config, family_options(family, self.config.family_options))
        self.runner = runner
        self.model_info: ModelInfo = runner.info()
        """What the loaded model is and can do (typed; `info()` is its JSON card)."""
        self.family = self.model_info.family
        self.sample_rate = runner.sample_rate
        method = self.config.decode_method
        if method is not None and method not in self.model_info.decode_methods:
            runner.shutdown()
            raise InvalidRequestError(
                f"decode_method {method!r} is not offered by this {self.family} model "
                f"(it offers: {', '.join(self.model_info.decode_methods) or 'none'})"
            )
        self.scheduler = Scheduler.from_config(self.config)
        self._inbox: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
        self._peeked: list[Command | None] = []  # taken by wait_for_work, applied first by step
        self._requests: dict[str, Request] = {}
        self._waiting: list[Request] = []
        self._live_ids: set[str] = set()  # ids accepted and not yet finished (any thread may read)
        self._ids_lock = threading.Lock()
        self._step_lock = threading.Lock()
        self._waiters: dict[str, Future[RequestOutput]] = {}
        self._loop_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._shutdown = False
        self._counter = itertools.count()
        self.stats: dict[str, int] = {"steps": 0, "admitted": 0, "finished": 0, "errors": 0}
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
        mi = self.model_info
        card: dict[str, Any] = {
            f.name: list(v) if isinstance(v := getattr(mi, f.name), tuple) else v
            for f in dataclasses.fields(mi) if f.name != "details"
        }
        card.update(mi.details)
        card.update(streaming=mi.supports_streaming, service_mode=self.config.service_mode,
                    streaming_enabled=self.streaming_enabled, kernels=self.kernels.as_info())
        return card

    @property
    def num_running(self) -> int:
        return sum(1 for r in self._requests.values() if r.status == RequestStatus.RUNNING)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def has_unfinished(self) -> bool:
        with self._ids_lock:
            return bool(self._live_ids)

    # --------------------------------------------------------------- mutations

    def _new_id(self, request_id: str | None) -> str:
        rid = request_id or f"req-{uuid.uuid4().hex[:12]}"
        with self._ids_lock:
            if self._shutdown:
                raise EngineShutdownError("engine is shut down")
            if rid in self._live_ids:
                raise InvalidRequestError(f"request id {rid!r} is already in use")
            self._live_ids.add(rid)
        return rid

    def validate_options(self, decoding: DecodingOptions | None, streaming: bool = False) -> DecodingOptions:
        """The options a request would be admitted with, or InvalidRequestError / UnsupportedError:
        for a caller that holds a request's audio itself before submitting it."""
        return self._check_options(decoding, streaming)

    def _check_options(self, decoding: DecodingOptions | None, streaming: bool) -> DecodingOptions:
        options = decoding or DecodingOptions()
        if not isinstance(options, DecodingOptions):
            raise InvalidRequestError(f"decoding must be DecodingOptions, got {type(options).__name__}")
        options.validate()
        self.runner.check_options(options, streaming)
        return options

    def validate_audio(self, audio: Any, sample_rate: int | None = None, allow_empty: bool = False) -> np.ndarray:
        """Return `audio` as a contiguous float32 mono array, or raise InvalidRequestError."""
        if sample_rate is not None and sample_rate != self.sample_rate:
            raise InvalidRequestError(
                f"audio must be at {self.sample_rate} Hz (got {sample_rate} Hz); resample before submitting"
            )
        if not isinstance(audio, np.ndarray):
            raise InvalidRequestError(f"audio must be a numpy float32 array, got {type(audio).__name__}")
        if audio.dtype != np.float32:
            raise InvalidRequestError(f"audio must be float32 samples in [-1, 1], got dtype {audio.dtype}")
        if audio.ndim != 1:
            raise InvalidRequestError(f"audio must be mono (1-D), got shape {audio.shape}")
        if audio.size == 0 and not allow_empty:
            raise InvalidRequestError("audio is empty")
        if audio.size and not np.isfinite(audio).all():
            raise InvalidRequestError("audio contains NaN or infinite samples")
        return np.ascontiguousarray(audio)

    def add_request(
        self,
        audio: Any,
        streaming: bool = False,
        priority: int = 0,
        decoding: DecodingOptions | None = None,
        request_id: str | None = None,
        sample_rate: int | None = None,
    ) -> str:
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
        options = self._check_options(decoding, streaming=False)
        rid = self._new_id(request_id)
        self._inbox.put(AddRequest(rid, samples, streaming=False, priority=priority, decoding=options))
        return rid

    def add_streaming_request(
        self, priority: int = 0, decoding: DecodingOptions | None = None, request_id: str | None = None
    ) -> str:
        """Open a live stream; audio follows through `feed_chunk`. Refused by an engine whose
        `service_mode` is 'offline' (it builds no streaming runtime)."""
        self._check_streaming()
        options = self._check_options(decoding, streaming=True)
        rid = self._new_id(request_id)
        self._inbox.put(AddRequest(rid, None, streaming=True, priority=priority, decoding=options))
        return rid

    def _check_streaming(self) -> None:
        if not self.streaming_enabled:
            if self.config.service_mode != "streaming":
                raise InvalidRequestError(
                    "this engine serves offline requests only (service_mode='offline'); submit the "
                    "whole audio with add_request(audio) or build the engine with service_mode='streaming'"
                )
            raise UnsupportedError(f"model family {self.family!r} has no streaming runtime")

    def feed_chunk(self, request_id: str, chunk: Any, is_last: bool = False, sample_rate: int | None = None) -> None:
        samples = self.validate_audio(chunk, sample_rate, allow_empty=True)
        with self._ids_lock:
            if request_id not in self._live_ids:
                raise UnknownRequestError(f"unknown request id {request_id!r}")
        self._inbox.put(FeedAudio(request_id, samples, is_last))

    def abort_request(self, request_id: str) -> None:
        """Cancel a request; it finishes with finish_reason='abort' at the next step."""
        with self._ids_lock:
            if request_id not in self._live_ids:
                raise UnknownRequestError(f"unknown request id {request_id!r}")
        self._inbox.put(AbortRequest(request_id))

    def submit(self, command: Command) -> None:
        """Post an already-validated command (the serving layer's path)."""
        if isinstance(command, AddRequest):
            if command.streaming:
                self._check_streaming()
            if command.audio is not None:
                command.audio = self.validate_audio(command.audio)
            command.decoding = self._check_options(command.decoding, command.streaming)
            command.request_id = self._new_id(command.request_id)
        self._inbox.put(command)

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
        with self._step_lock:
            outputs = self._apply_commands()
            outputs += self._schedule()
            self._release_attached_audio()
            if self.runner.has_work():
                with self.metrics.active():
                    outputs += self.runner.execute()
                if self.runner.streams_stepped:  # the rows of a streaming batch: streams advanced together
                    self.metrics.observe_batch("streaming", self.runner.streams_stepped)
            self.stats["steps"] += 1
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
                    audio=cmd.audio,  # type: ignore[arg-type]
                )
                self._requests[req.request_id] = req
                self._waiting.append(req)
            elif isinstance(cmd, FeedAudio):
                req = self._requests.get(cmd.request_id)
                if req is None or req.input_finished:
                    continue  # finished meanwhile (abort, error): late audio is dropped
                self.metrics.count_audio(cmd.chunk.size / self.sample_rate)  # type: ignore[attr-defined]
                if cmd.attached:
                    req.attached_audio = cmd.chunk  # type: ignore[assignment]
                    if not req.attached_audio.size:  # type: ignore[union-attr]
                        req.attached_audio, req.input_finished = None, True
                    continue
                req.append_audio(cmd.chunk)  # type: ignore[arg-type]
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
        self.stats["admitted"] += len(admitted)
        self._observe_admission(admitted, decision, now)
        if admitted:
            with self.metrics.stage("streaming.allocate") if any(r.streaming for r in admitted) else nullcontext():
                outputs += self.runner.admit(admitted)
        return outputs

    def _observe_admission(self, admitted: list[Request], decision: SchedulerOutput, now: float) -> None:
        streams = [r for r in admitted if r.streaming]
        if streams:  # their batch size is counted where they run together (step)
            self.metrics.observe_queue_waits("streaming", [now - r.arrival_time for r in streams])
        offline = [r for r in admitted if not r.streaming]
        if offline:  # admitted together, encoded together: one offline batch
            self.metrics.observe_batch("offline", len(offline), [now - r.arrival_time for r in offline])
            self.metrics.count_audio(sum(r.duration for r in offline))
            self.metrics.observe_padding(decision.padded_length, decision.useful_length)

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
            with self._ids_lock:
                self._live_ids.discard(out.request_id)
            self.stats["finished"] += 1
            if out.finish_reason == "error":
                self.stats["errors"] += 1
            waiter = self._waiters.pop(out.request_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(out)
        return outputs

    def fail_all(self, error: str, stage: str = "engine") -> list[RequestOutput]:
        """End every request with an error output (after a step failure left the state unknown)."""
        with self._step_lock:
            self._apply_commands()
            outputs = []
            for req in list(self._requests.values()):
                if req.status == RequestStatus.RUNNING:
                    try:
                        self.runner.release(req)
                    except Exception:  # the runner is already in trouble; the request ends anyway
                        logger.exception("release of %s failed", req.request_id)
                outputs.append(RequestOutput(request_id=req.request_id, finished=True, finish_reason="error",
                                             error=error, error_stage=stage, duration=req.duration))
            self._waiting.clear()
            return self._update(outputs)

    # ------------------------------------------------------------ convenience

    def run(self, timeout: float | None = None) -> list[RequestOutput]:
        """Step until no request is unfinished; return the outputs of the requests that finished,
        in the order they finished. Streams end when their input does (`feed_chunk(...,
        is_last=True)` or attached audio), so feed the last chunk before draining; while live
        streams wait for audio from another thread, `run` blocks on the engine's inbox.
        `timeout` (seconds) raises TimeoutError if the engine has not drained by then."""
        if self._loop_thread is not None:
            raise RuntimeError("run() drains the engine from the caller's thread, but the background loop owns it")
        deadline = None if timeout is None else time.monotonic() + timeout
        finished: list[RequestOutput] = []
        while self.has_unfinished():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"run(): {len(self._live_ids)} request(s) still unfinished after {timeout} s")
            if not self.wait_for_work(timeout=IDLE_WAIT_S if remaining is None else min(remaining, IDLE_WAIT_S)):
                continue
            finished.extend(o for o in self.step() if o.finished)
        return finished

    def run_forever(self) -> None:
        """Drive `step()` until `shutdown()`, blocking on the inbox while idle: the loop of
        `start_background_loop`. Outputs reach `transcribe*` callers through their futures; a
        serving layer that routes outputs itself runs its own loop over `wait_for_work` + `step`."""
        while not self._stop.is_set():
            if not self.wait_for_work(timeout=IDLE_WAIT_S):
                continue
            self.step()

    def start_background_loop(self) -> None:
        if self._loop_thread is None:
            self._loop_thread = threading.Thread(target=self.run_forever, name="oasr-engine", daemon=True)
            self._loop_thread.start()

    def transcribe_outputs(
        self,
        audio: np.ndarray | Sequence[np.ndarray],
        streaming: bool = False,
        decoding: DecodingOptions | None = None,
        priority: int = 0,
        sample_rate: int | None = None,
    ) -> list[RequestOutput]:
        """Transcribe one waveform or a list of them, submitted together so they batch; returns one
        finished `RequestOutput` per waveform, in input order (words, confidence, timestamps,
        nbest_texts and finish_reason live there). `streaming=True` runs the streaming path with
        all audio attached (see `add_request`)."""
        if not isinstance(streaming, bool):
            raise TypeError(f"streaming must be a bool, got {type(streaming).__name__} (decoding is the third argument)")
        audios = [audio] if isinstance(audio, np.ndarray) else list(audio)
        futures: list[Future[RequestOutput]] = []
        submitted: list[str] = []
        try:
            for a in audios:
                rid = f"tx-{next(self._counter)}-{uuid.uuid4().hex[:6]}"
                fut: Future[RequestOutput] = Future()
                self._waiters[rid] = fut
                try:
                    self.add_request(a, streaming=streaming, priority=priority, decoding=decoding,
                                     request_id=rid, sample_rate=sample_rate)
                except Exception:
                    self._waiters.pop(rid, None)
                    raise
                submitted.append(rid)
                futures.append(fut)
        except Exception:
            for rid in submitted:  # a bad waveform in the list: withdraw the ones already queued
                self._waiters.pop(rid, None)
                self.abort_request(rid)
            raise
        if self._loop_thread is None:
            while not all(f.done() for f in futures):
                self.step()
        return [f.result() for f in futures]

    def transcribe_offline(
        self, audio: np.ndarray | Sequence[np.ndarray], decoding: DecodingOptions | None = None
    ) -> str | list[str]:
        """Offline transcription whatever the service mode: a str for one waveform, a list for a list."""
        return self.transcribe(audio, streaming=False, decoding=decoding)

    def transcribe(
        self,
        audio: np.ndarray | Sequence[np.ndarray],
        streaming: bool = False,
        decoding: DecodingOptions | None = None,
    ) -> str | list[str]:
        """Transcript text: a str for one waveform, a list for a list. `streaming=True` runs the
        streaming path with all audio attached. A failed request raises RuntimeError."""
        outs = self.transcribe_outputs(audio, streaming=streaming, decoding=decoding)
        for o in outs:
            if o.finish_reason == "error":
                raise RuntimeError(f"request {o.request_id} failed at {o.error_stage}: {o.error}")
        texts = [o.text for o in outs]
        return texts[0] if isinstance(audio, np.ndarray) else texts

    def shutdown(self) -> None:
        """Stop the background loop, abort what is left, free the runner. Idempotent."""
        with self._ids_lock:
            if self._shutdown:
                return
            self._shutdown = True
        self._stop.set()
        self._inbox.put(None)
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=10)
        with self._step_lock:
            self._apply_commands()  # requests still in the inbox are aborted too
            for req in list(self._requests.values()):
                out = self._abort(req)
                waiter = self._waiters.pop(req.request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(out)
            self._requests.clear()
            self._waiting.clear()
            with self._ids_lock:
                self._live_ids.clear()
            self.runner.shutdown()
        if self._heap_frozen:
            thaw_heap()
            self._heap_frozen = False


__all__ = ["ASREngine"]
