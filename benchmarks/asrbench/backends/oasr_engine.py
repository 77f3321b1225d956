"""Our engine in process: `ASREngine` driven by one owner thread, like the server's bridge.

Requests from any number of caller threads are posted with add_request / feed_chunk; one
driver thread blocks on the engine's inbox, calls step(), and routes each RequestOutput by
request id (offline -> a Future, streaming -> its session's partials/final). Batches go in
through the same path, submitted under a gate the driver takes before stepping, so a
batch is admitted together (the engine's native batching, not concurrency emulation).

`-o step_delay_ms=N` wraps the engine's model runner so every `execute()` sleeps N ms: the
slowed candidate of the suite's regression-gate test. The engine itself has no such hook; the
value in effect is recorded in run.json.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any, ClassVar

import numpy as np

from benchmarks.asrbench.backends.base import (
    KINDS,
    Backend,
    BackendError,
    Capability,
    Option,
    StreamSession,
    Utterance,
    supported,
    unsupported,
)
from benchmarks.asrbench.paths import default_ckpt_dir

logger = logging.getLogger(__name__)

RESULT_TIMEOUT_S = 1800.0
"""Longest a single request may take before the call fails (a stuck engine must not hang a run)."""


class OasrEngineBackend(Backend):
    name = "oasr_engine"
    summary = "OASR ASREngine in process (native batching; live streaming when the model supports it)"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "ckpt_dir": Option(default_ckpt_dir(), "checkpoint dir; default $CKPT_DIR, empty = the embedded Whisper tiny.en"),
        "dtype": Option("auto", "EngineConfig.dtype: auto (float16 on CUDA, float32 on CPU), float32, float16, bfloat16"),
        "engine": Option({}, "further EngineConfig fields, e.g. -o \"engine={max_wait_time: 0.05}\"; a quantization "
                         "object here ({scheme: auto, ignore: decoder.*}) wins over -o quantization="),
        "service_mode": Option("streaming", "engine service mode", ("streaming", "offline")),
        "max_batch_size": Option(16, "requests decoded together (EngineConfig.max_batch_size)"),
        "quantization": Option("auto", "EngineConfig.quantization (auto: the engine's default, int8 on CPUs with VNNI)",
                               ("auto", "none", "int8_w8a8")),
        "num_threads": Option(0, "torch intra-op threads; 0 = torch default"),
        "reference_exact": Option(False, "compute what openai/whisper computes: float32 and 30 s encoder windows "
                                  "(quantization=none, Whisper offline_encoder_context=full); the configuration "
                                  "for drift checks against the transformers backend"),
        "beam_size": Option(1, "beams per window (1 = greedy)"),
        "concurrency": Option(0, "requests the throughput kind keeps in flight; 0 = max_batch_size"),
        "step_delay_ms": Option(0, "ms slept after every runner execute() (a deliberately slowed engine, for gate tests)"),
    }

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self._engine: Any = None
        self._driver: threading.Thread | None = None
        self._stop = threading.Event()
        self._gate = threading.Lock()
        self._futures: dict[str, Future[Any]] = {}
        self._streams: dict[str, _EngineStream] = {}
        self._routes_lock = threading.Lock()

    @property
    def label(self) -> str:
        if self.options["reference_exact"]:
            return "oasr_engine[exact]"
        q = self.options["engine"].get("quantization", self.options["quantization"])
        if isinstance(q, dict):
            q = ",".join(f"{k}={v}" for k, v in q.items())
        return "oasr_engine" + (f"[{q}]" if q != "auto" else "")

    def capabilities(self) -> dict[str, Capability]:
        caps = {k: supported() for k in KINDS}
        if self._engine is not None and not self._engine.streaming_enabled:
            family = self._engine.info().get("family")
            caps["streaming"] = unsupported(
                f"model family {family!r} has no incremental streaming (runner.supports_streaming=False) or "
                f"service_mode={self.options['service_mode']!r}; the engine would only buffer streams to their end")
        return caps

    def start(self) -> None:
        try:
            from engine import ASREngine, EngineConfig
        except ImportError as exc:
            raise BackendError(f"cannot import the engine: {exc}") from exc
        unknown = set(self.options["engine"]) - set(EngineConfig.__dataclass_fields__)
        if unknown:
            raise BackendError(f"-o engine=: EngineConfig has no field(s) {sorted(unknown)}")
        fields = dict(self.options["engine"])
        # a quantization object in engine= ({scheme, ignore, ...}) wins over the scheme option
        quantization = fields.pop("quantization", self.options["quantization"])
        if self.options["reference_exact"]:
            quantization = "none"
            families = dict(fields.get("family_options", {}))
            families["whisper"] = {**families.get("whisper", {}), "offline_encoder_context": "full"}
            fields["family_options"] = families
        config = EngineConfig(
            ckpt_dir=self.options["ckpt_dir"] or None,
            dtype=self.options["dtype"],
            service_mode=self.options["service_mode"],
            max_batch_size=int(self.options["max_batch_size"]),
            quantization=quantization,
            num_threads=int(self.options["num_threads"]) or None,
            **fields,
        )
        self._engine = ASREngine(config)
        delay_ms = float(self.options["step_delay_ms"])
        if delay_ms > 0:
            self._engine.runner = _SlowedRunner(self._engine.runner, delay_ms / 1000.0)
        self._driver = threading.Thread(target=self._drive, name="asrbench-engine", daemon=True)
        self._driver.start()

    def _decoding(self) -> Any:
        from engine import DecodingOptions

        return DecodingOptions(beam_size=int(self.options["beam_size"]), language="en")

    def _drive(self) -> None:
        from engine.loop import LoopObserver, drive

        gate = self._gate

        class _Gated(LoopObserver):
            def step_started(self) -> None:
                with gate:  # a batch being submitted is complete before the step admits it
                    pass

        def route(outputs: list[Any]) -> None:
            for out in outputs:
                self._route(out)

        drive(self._engine, route, stop=self._stop.is_set, observer=_Gated())

    def _route(self, out: Any) -> None:
        with self._routes_lock:
            fut = self._futures.pop(out.request_id, None) if out.finished else None
            stream = self._streams.get(out.request_id)
            if out.finished:
                self._streams.pop(out.request_id, None)
        if fut is not None:
            fut.set_result(out)
        elif stream is not None:
            stream.on_output(out)

    def _submit(self, audios: list[np.ndarray]) -> list[Future[Any]]:
        if self._engine is None:
            raise BackendError("backend not started")
        futures = []
        decoding = self._decoding()
        with self._gate:
            for audio in audios:
                rid = f"bench-{uuid.uuid4().hex[:12]}"
                fut: Future[Any] = Future()
                with self._routes_lock:
                    self._futures[rid] = fut
                self._engine.add_request(audio, decoding=decoding, request_id=rid)
                futures.append(fut)
        return futures

    @staticmethod
    def _text(out: Any) -> str:
        if out.finish_reason == "error":
            raise BackendError(f"engine error at {out.error_stage}: {out.error}")
        return str(out.text).strip()

    def transcribe(self, utt: Utterance) -> str:
        (fut,) = self._submit([utt.audio])
        return self._text(fut.result(timeout=RESULT_TIMEOUT_S))

    def transcribe_batch(self, utts: list[Utterance]) -> list[str]:
        futures = self._submit([u.audio for u in utts])
        return [self._text(f.result(timeout=RESULT_TIMEOUT_S)) for f in futures]

    def open_stream(self, utt: Utterance) -> StreamSession:
        if self._engine is None:
            raise BackendError("backend not started")
        rid = f"bench-s-{uuid.uuid4().hex[:12]}"
        session = _EngineStream(self._engine, rid)
        with self._routes_lock:
            self._streams[rid] = session
        self._engine.add_streaming_request(decoding=self._decoding(), request_id=rid)
        return session

    def concurrency(self) -> int:
        return int(self.options["concurrency"]) or int(self.options["max_batch_size"])

    def stop(self) -> None:
        self._stop.set()
        if self._driver is not None:
            self._driver.join(timeout=30)
            self._driver = None
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

    def info(self) -> dict[str, Any]:
        info = dict(self._engine.info()) if self._engine is not None else {}
        info["step_delay_ms"] = float(self.options["step_delay_ms"])
        return info


class _SlowedRunner:
    """A model runner whose every `execute()` takes `delay_s` longer; all else is the wrapped runner's."""

    def __init__(self, runner: Any, delay_s: float) -> None:
        self._runner = runner
        self._delay_s = delay_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def execute(self) -> Any:
        outputs = self._runner.execute()
        time.sleep(self._delay_s)
        return outputs


class _EngineStream(StreamSession):
    def __init__(self, engine: Any, request_id: str) -> None:
        super().__init__()
        self._engine = engine
        self._rid = request_id

    def send(self, chunk: np.ndarray) -> None:
        self._feed(chunk, is_last=False)

    def close_input(self) -> None:
        self._feed(np.zeros(0, dtype=np.float32), is_last=True)

    def _feed(self, chunk: np.ndarray, is_last: bool) -> None:
        # A stream the engine already ended with an error is unknown to it now: report the cause.
        if self.error is not None:
            raise BackendError(self.error)
        try:
            self._engine.feed_chunk(self._rid, chunk, is_last=is_last)
        except Exception:
            if self.error is not None:
                raise BackendError(self.error) from None
            raise

    def abort(self) -> None:
        try:
            self._engine.abort_request(self._rid)
        except Exception:  # already finished: nothing to release
            logger.debug("abort of %s: already gone", self._rid)

    def on_output(self, out: Any) -> None:
        if out.finish_reason == "error":
            self._fail(f"engine error at {out.error_stage}: {out.error}")
        elif out.finished:
            self._final(str(out.text).strip())
        else:
            self._partial(str(out.text))
