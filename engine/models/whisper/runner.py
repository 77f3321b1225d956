"""Whisper model runner: admitted requests become window jobs; each `execute()` encodes the
waiting windows in one batch, joins them to the running decoder batch, and decodes one token
for every row (continuous batching).

The runner is glue: the loaded parts (parts.py) are shared by every request's state
(offline.py, longform.py, streaming.py; collate.py makes offline requests ready, live_streams.py
holds the open streams and starts their passes), the planner (planning.py) picks what the encoder
and the decoder batch (batch.py) run next, and the runner runs it (encode_join.py: the encode and
prefill stages) and routes results and errors."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import replace
from functools import partial

import torch

from engine.config import EngineConfig
from engine.errors import InvalidRequestError
from engine.log_mel import SAMPLE_RATE, LogMelExtractor
from engine.metrics import shared_stage_timer, stage_timer
from engine.models.whisper.batch import DecodeBatch
from engine.models.whisper.collate import Collated, CollationsBeside, Collator
from engine.models.whisper.context import ContextEncoder
from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.describe import whisper_info
from engine.models.whisper.encode_join import collect_encoded, encode, join, live_share
from engine.models.whisper.encoder_thread import EncoderThread
from engine.models.whisper.int8 import exact_integer_decoder, int8_kernel
from engine.models.whisper.live_streams import LiveStreams
from engine.models.whisper.longform import WINDOWS_IN_FLIGHT, SegmentedTranscription
from engine.models.whisper.model import Whisper, WhisperDims
from engine.models.whisper.offline import cut_runaways
from engine.models.whisper.options import WhisperOptions
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.planning import WindowPlanner
from engine.models.whisper.step_threads import DECODE_THREADS, StepThreads
from engine.models.whisper.tokenizer import WhisperTokenizer
from engine.models.whisper.totals import WhisperTotals
from engine.models.whisper.window import FailRequest, WindowJob, WindowOwner, WindowResult
from engine.request import Request, error_output
from engine.runner import ModelInfo, RunnerStats
from engine.streaming.silence_gate import SilenceGate
from engine.types import DecodingOptions, RequestOutput
from engine.vad import VoiceActivityModel, load_vad_model

logger = logging.getLogger(__name__)

COLLATED_WAIT_S = 0.05
"""Longest wait in one step for a long request collated beside the engine thread, when the engine
has nothing else to do: it returns as soon as one is back, and between waits the loop admits new
work (a live stream arriving meanwhile is stepped, not held for the collation)."""


class WhisperRunner:
    supports_streaming = True  # by re-decoding a sliding window (see streaming.py)
    sample_rate = SAMPLE_RATE

    def __init__(self, config: EngineConfig, options: WhisperOptions | None = None):
        self.config = config
        self.ckpt_dir = config.resolved_ckpt_dir()
        self.options = options or WhisperOptions()
        self.parts = WhisperParts.load(config)
        self.batch = self._new_batch()
        self.planner = WindowPlanner(max(config.max_decode_rows, config.max_batch_size), config.max_batch_size,
                                     self.parts.dims.n_audio_ctx)
        self.active: dict[str, WindowOwner | SegmentedTranscription] = {}
        self.collating: list[Request] = []  # offline requests admitted since the last execute()
        self.streams_stepped = 0
        # The silence gate only gates live passes, which an offline-mode engine never runs; speech
        # coverage needs the VAD offline too (off, an offline engine skips loading it, ~0.3 s).
        gate_wanted = self.options.skip_silent_passes and config.service_mode == "streaming"
        # long offline requests are cut at its silences (longform.py)
        vad_wanted = gate_wanted or self.options.speech_coverage or self.options.offline_long_form == "parallel"
        self.vad = _load_vad() if vad_wanted else None
        gate = SilenceGate(self.vad) if gate_wanted and self.vad is not None else None
        self.totals = WhisperTotals()  # what stats() reports beside the picker's shed and skipped passes
        # a request's coverage bookkeeping (coverage.py); without the VAD or the option, it is off.
        # Not a bound method: the collator holding one would tie the runner into a reference cycle,
        # and an unloaded model's weights would wait for a garbage collection to be freed
        self._coverage = partial(SpeechCoverage, self.vad if self.options.speech_coverage else None, self.totals)
        self.streams = LiveStreams(self.parts, self.options, gate, self._coverage, self.totals)
        self.stream_chunk_samples = self.streams.step_samples  # one pass's worth of new audio
        self.threads = torch.get_num_threads()  # the engine's intra-op threads, as configured at its build
        # a long request holds WINDOWS_IN_FLIGHT windows at once at most (longform.py)
        self.collator = Collator(self.parts, self.options, self.vad, self._coverage,
                                 windows_in_flight=min(WINDOWS_IN_FLIGHT, self.planner.max_rows))
        # long requests collated on a thread of their own, not yet taken (collate.py)
        self.collating_beside = CollationsBeside(self.collator, DECODE_THREADS, self.threads)
        # a second core encodes beside the decoder (encoder_thread.py); with one, the engine
        # thread alternates between them
        use_thread = self.parts.device.type == "cpu" and self.threads > DECODE_THREADS
        self.encoder_thread = EncoderThread(self.parts.context) if use_thread else None
        self.step_threads = StepThreads(self.parts.device, exact_integer_decoder(self.parts.model.decoder))
        logger.info("whisper %s loaded from %s (%s) on %s/%s, quantization=%s", self.parts.model_name, self.ckpt_dir,
                    self.parts.checkpoint_format, self.parts.device, self.parts.dtype, self.parts.quantization)

    # ---- facts (the parts, for tests and tools) ----

    @property
    def model(self) -> Whisper:
        return self.parts.model

    @property
    def tokenizer(self) -> WhisperTokenizer:
        return self.parts.tokenizer

    @property
    def dims(self) -> WhisperDims:
        return self.parts.dims

    @property
    def features(self) -> LogMelExtractor:
        return self.parts.features

    @property
    def context_encoder(self) -> ContextEncoder:
        return self.parts.context

    @property
    def ckpt_format(self) -> str:
        return self.parts.checkpoint_format

    def info(self) -> ModelInfo:
        parts = self.parts
        quantized = parts.quantization == "int8_w8a8"
        return whisper_info(
            parts.size, checkpoint_format=parts.checkpoint_format, config=self.config, options=self.options,
            parameters=sum(p.numel() for p in parts.model.parameters()),
            loaded_details={
                "device": str(parts.device),
                "dtype": str(parts.dtype).removeprefix("torch."),
                "quantization": parts.quantization,
                "quantization_reason": parts.quantization_reason,
                "int8_kernel": int8_kernel() if quantized else None,
                "quantization_ignore": list(self.config.quantization_config().ignore) if quantized else [],
            })

    def stats(self) -> RunnerStats:
        return RunnerStats(streams=len(self.streams), streams_spoken=self.streams.spoken(),
                           decode_slots_used=self.batch.num_rows,
                           decode_slots_capacity=self.planner.max_rows,
                           stream_passes_total=self.totals.passes,
                           stream_encoded_seconds_total=self.totals.encoded_s,
                           stream_passes_shed_total=self.streams.picker.passes_shed,
                           stream_passes_late_total=self.planner.passes_late,
                           stream_passes_skipped_total=self.streams.picker.passes_skipped,
                           speech_recovered_seconds_total=self.totals.speech_recovered_s,
                           speech_uncovered_seconds_total=self.totals.speech_uncovered_s)

    # ---- admission ----

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        self.parts.check_options(options)
        if options.beam_size > self.planner.max_rows:  # its window would wait for rows forever
            raise InvalidRequestError(f"beam_size {options.beam_size} exceeds the engine's decoder rows "
                                      f"(max_decode_rows={self.planner.max_rows})")

    def free_slots(self) -> int:
        # live streams are bounded by the server's inflight permits, not by batch slots: an idle
        # stream waiting for audio must not keep offline work out
        collating = len(self.collating) + self.collating_beside.requests()
        return max(0, self.config.max_batch_size - (len(self.active) + collating - len(self.streams)))

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        for r in (r for r in requests if r.streaming):
            self.active[r.request_id] = self.streams.open(r)
        # offline requests are collated (features, window plan) by the next execute(), where
        # the engine's step times it as offline.collate
        for r in requests:
            if not r.streaming and r.decoding.best_of > self.planner.max_rows:
                # a sampled window (a fallback too) draws fewer candidates rather than never fit
                r.decoding = replace(r.decoding, best_of=self.planner.max_rows)
        self.collating.extend(r for r in requests if not r.streaming)
        return []

    def _collate(self, outputs: list[RequestOutput]) -> None:
        """The admitted offline requests become transcriptions whose first jobs (a long one's:
        all of its windows') wait to be encoded (collate.py). While the engine has other work or
        live streams, long ones are collated beside the engine thread, on one torch thread: their
        VAD pass and windows' features take seconds an hour, which every live stream's passes
        would wait for. An idle engine collates them itself, on every thread, as fast as it can."""
        requests, self.collating = self.collating, []
        beside = bool(self.streams) or self._other_work()  # open streams: their next passes are due soon
        long = [r for r in requests if self.collator.is_long(r)] if beside else []
        if long:
            self.collating_beside.start(long)
        self._take_collated(self.collator.collate([r for r in requests if not any(r is x for x in long)], outputs))

    def _collect_collated(self, outputs: list[RequestOutput]) -> None:
        """Take the long requests collated beside the engine thread; when the engine has nothing
        else to do, wait a little for them first (the loop then admits new work between waits)."""
        if self.collating_beside:
            wait_s = 0.0 if self._other_work() else COLLATED_WAIT_S
            self._take_collated(self.collating_beside.take(outputs, wait_s))

    def _take_collated(self, ready: list[Collated]) -> None:
        for request, state, jobs in ready:
            self.active[request.request_id] = state
            for job in jobs:
                self.planner.submit(job)

    def _other_work(self) -> bool:
        """The engine has work beside collating long requests (steps it would take meanwhile)."""
        if self.planner.has_work() or self.batch.groups or (self.encoder_thread is not None and self.encoder_thread.busy):
            return True
        return self.streams.due()

    def release(self, request: Request) -> None:
        self.collating = [r for r in self.collating if r is not request]
        self.collating_beside.release(request)  # its collation is dropped when it comes back
        self.streams.end(request.request_id)
        state = self.active.pop(request.request_id, None)
        if state is None:
            return
        # by id: a long request's windows and a stream's backlog segments have owners of their own
        self.planner.drop_request(request.request_id)
        for g in list(self.batch.groups):
            if g.job.request_id == request.request_id:
                self.batch.remove_job(g.job)

    def has_work(self) -> bool:
        # an encoder batch in flight counts even when its windows were dropped: it must be collected
        return bool(self.collating or self.collating_beside) or self._other_work()

    def shutdown(self) -> None:
        if self.encoder_thread is not None:
            self.encoder_thread.shutdown()
            self.encoder_thread = None
        self.collating.clear()
        self.collating_beside.clear()
        self.active.clear()
        self.streams.clear()
        self.planner.clear()
        self.batch = self._new_batch()

    def _new_batch(self) -> DecodeBatch:
        return DecodeBatch(self.parts.model.decoder, self.parts.tokenizer.no_speech, self.parts.device)

    # ---- execution ----

    @torch.inference_mode()
    def execute(self) -> list[RequestOutput]:
        """One step. Stages are timed as offline.* or streaming.*; a batch holding both offline
        windows and live passes is split between the two by the live share of its mel frames
        (encoder) or rows (decoder), see encode_join.live_share."""
        outputs: list[RequestOutput] = []
        fail = partial(self._fail, outputs=outputs)
        if self.collating:
            with stage_timer("offline.collate"):
                self._collate(outputs)
        self._collect_collated(outputs)
        if self.streams:
            self._start_stream_passes(fail, outputs)
        collect_encoded(self.encoder_thread, self.parts, self.planner, self.batch, fail)
        thread = self.encoder_thread
        if thread is not None and not thread.busy and self.planner.may_encode_beside(self.batch):
            jobs = self.planner.take_encode(self.batch)
            if jobs:
                self.planner.encoding.extend(jobs)
                thread.start(jobs)
        elif thread is None or not thread.busy or self.planner.final_first():
            # a final pass does not wait for the encoder thread's batch: the client waits on it
            jobs = self.planner.take_encode(self.batch, self.streams.live()) if self.planner.may_encode(self.batch) else []
            if jobs:
                with shared_stage_timer("encode", live_share(jobs, lambda j: j.mel.shape[1])):
                    encode(jobs, self.parts, self.planner, fail)
        # a prefill's large matmuls (the cross K/V of whole windows) take every thread unless the
        # encoder thread holds one; the per-token steps run on DECODE_THREADS
        with self.step_threads.narrowed() if thread is not None and thread.busy else nullcontext():
            join(self.planner.take_join(self.batch, self.active), self.parts, self.batch, fail)
        self.streams_stepped = len({id(g.job.owner) for g in self.batch.groups if not g.done and g.job.live})
        narrow = self.step_threads.narrow(encoder_busy=thread is not None and thread.busy,
                                          live_rows=self.streams_stepped > 0)
        with self.step_threads.narrowed() if narrow else nullcontext():
            self.planner.steps_since_encode += 1
            decoding = [g.job for g in self.batch.groups if not g.done]
            with shared_stage_timer("decode", live_share(decoding, lambda j: j.rows)) if self.batch.groups else nullcontext():
                finished = self.batch.step(lambda g, exc: fail(g.job.owner, "decode", exc))
        cut_runaways(self.batch.groups)
        for job, result in self.planner.results(finished, self.batch):
            # a live pass's result becomes its stream's partial or final (word alignment included);
            # an offline window's result advances its request to the next window
            with stage_timer("streaming.finalize" if job.live else "offline.advance"):
                self._hand_over(job, result, outputs)
        self.batch.evict_removed()  # withdrawn attempts free their rows before the engine idles
        return outputs

    def _hand_over(self, job: WindowJob, result: WindowResult, outputs: list[RequestOutput]) -> None:
        active = self.active.get(job.request_id)
        if active is None:
            return
        # a long request's windows report to it (it stitches them in order); any other job to its
        # own owner: the request itself, or a stream's backlog segment (which commits into the stream)
        state = active if isinstance(active, SegmentedTranscription) else job.owner
        try:
            update = state.on_window_done(job, result)
        except Exception as exc:
            logger.exception("post-processing failed for %s", job.request_id)
            self._fail(state, "postprocess", exc, outputs)
            return
        for stale in update.withdrawn:
            self._withdraw(stale)
        if update.output is not None:
            outputs.append(update.output)
            if update.output.finished:
                self.active.pop(job.request_id, None)
                self.streams.end(job.request_id)
        for nxt in update.jobs:
            self.planner.submit(nxt)

    def _start_stream_passes(self, fail: FailRequest, outputs: list[RequestOutput]) -> None:
        """Every stream with enough new audio (or at its end) gets a pass; their windows'
        features are extracted in one call and they join the encoder queue together."""
        with stage_timer("streaming.schedule"):
            passes, ended, behind = self.streams.picker.pick(self.streams.values(), self.planner, self._withdraw)
        self.streams.catch_up(behind, self.vad, self.planner, fail, outputs)  # the backlog decodes offline
        for stream in ended:  # nothing left to decode: the final is what is committed
            stream.final_done = True
            outputs.append(stream.on_empty_end())
            self.active.pop(stream.request.request_id, None)
            self.streams.end(stream.request.request_id)
        self.streams.start(passes, self.planner, fail)

    def _withdraw(self, job: WindowJob) -> None:
        self.planner.drop(job)
        self.batch.remove_job(job)

    def _fail(self, state: WindowOwner | SegmentedTranscription, stage: str, exc: Exception,
              outputs: list[RequestOutput]) -> None:
        rid = state.request.request_id
        if rid not in self.active:
            return
        logger.error("request %s failed at %s: %s", rid, stage, exc)
        self.release(state.request)
        outputs.append(error_output(state.request, stage, exc))


def _load_vad() -> VoiceActivityModel | None:
    """The packaged Silero VAD, shared by the silence gate and speech coverage; None (both off)
    when it cannot load: a missing VAD costs CPU and the coverage guarantee, never a request."""
    try:
        return load_vad_model("silero")
    except Exception as exc:
        logger.warning("Silero VAD unavailable (%s): live passes run over silence, speech coverage is off", exc)
        return None

