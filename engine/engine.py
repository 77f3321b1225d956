"""ASREngine: requests in, `RequestOutput`s out, one `step()` at a time.

`step()` is three verbs: schedule (admit waiting requests into the runner's free slots),
execute (the runner advances everything admitted by one batched step), update (finished
requests leave and their outputs are returned). Mutations from any thread (add, feed,
abort) are queued and applied together at the start of the next step, so the engine
state has exactly one owner: the thread that calls `step()`.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.errors import EngineShutdownError, InvalidRequestError, UnknownRequestError
from engine.registry import resolve_family
from engine.request import Request, RequestStatus
from engine.runner import ModelRunner
from engine.scheduler import Scheduler, WaitingRequest
from engine.types import AbortRequest, AddRequest, Command, DecodingOptions, FeedAudio, RequestOutput

logger = logging.getLogger(__name__)

class ASREngine:
    """Thread-safe front of one model runner. See the module docstring for the step loop."""

    def __init__(self, config: EngineConfig | None = None, runner: ModelRunner | None = None):
        self.config = config or EngineConfig()
        self.config.validate()
        if self.config.num_threads:
            import torch

            torch.set_num_threads(self.config.num_threads)
        if runner is None:
            family = resolve_family(self.config.resolved_ckpt_dir())
            runner = family.build(self.config)
            self.family = family.name
        else:
            self.family = type(runner).__name__
        self.runner = runner
        self.sample_rate = runner.sample_rate
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
        self.last_batch_size = 0
        self.last_streams_stepped = 0  # live streams the runner's forward advanced together in the last step
        self.last_queue_waits: list[float] = []
        self.stats: dict[str, int] = {"steps": 0, "admitted": 0, "finished": 0, "errors": 0}

    # ------------------------------------------------------------------ facts

    @property
    def streaming_enabled(self) -> bool:
        return self.config.service_mode == "streaming" and self.runner.supports_streaming

    def info(self) -> dict[str, Any]:
        return {**self.runner.info(), "service_mode": self.config.service_mode,
                "streaming_enabled": self.streaming_enabled}

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
        """Queue a request. Offline: `audio` is the whole waveform. Streaming: `audio` may be the
        first chunk (or None); more comes through `feed_chunk`."""
        if streaming:
            rid = self.add_streaming_request(priority=priority, decoding=decoding, request_id=request_id)
            if audio is not None:
                self.feed_chunk(rid, audio, is_last=False, sample_rate=sample_rate)
            return rid
        samples = self.validate_audio(audio, sample_rate)
        options = self._check_options(decoding, streaming=False)
        rid = self._new_id(request_id)
        self._inbox.put(AddRequest(rid, samples, streaming=False, priority=priority, decoding=options))
        return rid

    def add_streaming_request(
        self, priority: int = 0, decoding: DecodingOptions | None = None, request_id: str | None = None
    ) -> str:
        options = self._check_options(decoding, streaming=True)
        rid = self._new_id(request_id)
        self._inbox.put(AddRequest(rid, None, streaming=True, priority=priority, decoding=options))
        return rid

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
        return bool(self._admissible()) and self.runner.free_slots() > 0

    def wait_for_work(self, timeout: float | None = None) -> bool:
        """Block until a command arrives (or `timeout`) when there is nothing to do; no polling."""
        if self.has_work():
            return True
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
            self.last_streams_stepped = 0
            if self.runner.has_work():
                outputs += self.runner.execute()
                self.last_streams_stepped = self.runner.streams_stepped
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
                req.append_audio(cmd.chunk)  # type: ignore[arg-type]
                if cmd.is_last:
                    req.input_finished = True
            elif isinstance(cmd, AbortRequest):
                req = self._requests.get(cmd.request_id)
                if req is not None:
                    outputs.append(self._abort(req))
        return outputs

    def _abort(self, req: Request) -> RequestOutput:
        if req.status == RequestStatus.RUNNING:
            self.runner.release(req)
        elif req in self._waiting:
            self._waiting.remove(req)
        return RequestOutput(request_id=req.request_id, finished=True, finish_reason="abort",
                             duration=req.duration)

    def _admissible(self) -> list[Request]:
        if self.streaming_enabled:
            return list(self._waiting)
        # an offline engine serves a stream once its input is complete
        return [r for r in self._waiting if not r.streaming or r.input_finished]

    def _schedule(self) -> list[RequestOutput]:
        candidates = self._admissible()
        if not candidates:
            return []
        free = self.runner.free_slots()
        if free <= 0:
            return []
        for req in candidates:
            if req.streaming and not self.streaming_enabled:
                # buffered stream becomes an offline request over everything it received
                req.audio = req.take_pending_audio()
                req.streaming = False
        by_id = {r.request_id: r for r in candidates}
        now = time.monotonic()
        decision = self.scheduler.schedule(
            [WaitingRequest(r.request_id, 0.0 if r.streaming else r.duration, r.arrival_time, r.priority,
                            r.streaming) for r in candidates],
            free,
            now,
        )
        admitted = [by_id[rid] for rid in decision.admitted]
        if not admitted:
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
        self.last_batch_size = len(admitted)
        self.last_queue_waits = [now - r.arrival_time for r in admitted]
        self.stats["admitted"] += len(admitted)
        if admitted:
            outputs += self.runner.admit(admitted)
        return outputs

    def _update(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        for out in outputs:
            if not out.finished:
                continue
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

    def run(self) -> None:
        """Drive `step()` until `shutdown()`; blocks on the inbox while idle. Outputs reach
        `transcribe*` callers through their futures."""
        while not self._stop.is_set():
            if not self.wait_for_work(timeout=0.5):
                continue
            self.step()

    def start_background_loop(self) -> None:
        if self._loop_thread is None:
            self._loop_thread = threading.Thread(target=self.run, name="oasr-engine", daemon=True)
            self._loop_thread.start()

    def transcribe_outputs(
        self,
        audio: np.ndarray | Sequence[np.ndarray],
        decoding: DecodingOptions | None = None,
        priority: int = 0,
        sample_rate: int | None = None,
    ) -> list[RequestOutput]:
        """Transcribe one waveform or a list of them, submitted together so they batch."""
        audios = [audio] if isinstance(audio, np.ndarray) else list(audio)
        futures: list[Future[RequestOutput]] = []
        for a in audios:
            rid = f"tx-{next(self._counter)}-{uuid.uuid4().hex[:6]}"
            fut: Future[RequestOutput] = Future()
            self._waiters[rid] = fut
            try:
                self.add_request(a, priority=priority, decoding=decoding, request_id=rid, sample_rate=sample_rate)
            except Exception:
                self._waiters.pop(rid, None)
                for f_rid in list(self._waiters):
                    if self._waiters[f_rid] in futures:
                        self.abort_request(f_rid)
                raise
            futures.append(fut)
        if self._loop_thread is None:
            while not all(f.done() for f in futures):
                self.step()
        return [f.result() for f in futures]

    def transcribe_offline(
        self, audio: np.ndarray | Sequence[np.ndarray], decoding: DecodingOptions | None = None
    ) -> list[RequestOutput]:
        """Offline transcription, whatever the service mode."""
        return self.transcribe_outputs(audio, decoding)

    def transcribe(
        self, audio: np.ndarray | Sequence[np.ndarray], decoding: DecodingOptions | None = None
    ) -> str | list[str]:
        outs = self.transcribe_outputs(audio, decoding)
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
            for req in list(self._requests.values()):
                out = self._abort(req)
                waiter = self._waiters.pop(req.request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(out)
            self._requests.clear()
            self._waiting.clear()
            self.runner.shutdown()


__all__ = ["ASREngine"]
