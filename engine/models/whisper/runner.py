"""Whisper model runner: admitted requests become window jobs; each `execute()` encodes the
waiting windows in one batch, joins them to the running decoder batch, and decodes one token
for every row (continuous batching).

The runner is glue: the loaded parts (parts.py) are shared by every request's state
(offline.py, longform.py, streaming.py; collate.py makes offline requests ready), the planner
(planning.py) picks what the encoder and the decoder batch (batch.py) run next, and the runner
runs it and routes results and errors."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from functools import partial

import torch
from torch import Tensor

from engine.config import EngineConfig
from engine.errors import InvalidRequestError
from engine.log_mel import SAMPLE_RATE, LogMelExtractor
from engine.metrics import shared_stage_timer, stage_timer
from engine.models.whisper.batch import DecodeBatch
from engine.models.whisper.collate import Collated, CollationsBeside, Collator
from engine.models.whisper.context import ContextEncoder
from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.decoding import DecodeGroup
from engine.models.whisper.describe import whisper_info
from engine.models.whisper.encoder_thread import EncoderThread
from engine.models.whisper.int8 import exact_integer_decoder, int8_kernel
from engine.models.whisper.longform import WINDOWS_IN_FLIGHT, SegmentedTranscription
from engine.models.whisper.model import Whisper, WhisperDims
from engine.models.whisper.offline import cut_runaways
from engine.models.whisper.options import WhisperOptions
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.planning import WindowPlanner
from engine.models.whisper.step_threads import DECODE_THREADS, StepThreads
from engine.models.whisper.stream_passes import StreamPassPicker
from engine.models.whisper.streaming import StreamingTranscription
from engine.models.whisper.tokenizer import WhisperTokenizer
from engine.models.whisper.totals import WhisperTotals
from engine.models.whisper.window import WindowJob, WindowOwner, WindowResult
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
        self.streams: dict[str, StreamingTranscription] = {}
        self.step_samples = int(self.options.stream_step_ms * SAMPLE_RATE / 1000)
        self.stream_chunk_samples = self.step_samples  # one pass's worth of new audio
        self.streams_stepped = 0
        # The silence gate only gates live passes, which an offline-mode engine never runs; speech
        # coverage needs the VAD offline too (off, an offline engine skips loading it, ~0.3 s).
        gate_wanted = self.options.skip_silent_passes and config.service_mode == "streaming"
        # long offline requests are cut at its silences (longform.py)
        vad_wanted = gate_wanted or self.options.speech_coverage or self.options.offline_long_form == "parallel"
        self.vad = _load_vad() if vad_wanted else None
        gate = SilenceGate(self.vad) if gate_wanted and self.vad is not None else None
        self.stream_passes = StreamPassPicker(self.step_samples, gate)
        self.totals = WhisperTotals()  # what stats() reports beside the picker's shed and skipped passes
        # a request's coverage bookkeeping (coverage.py); without the VAD or the option, it is off.
        # Not a bound method: the collator holding one would tie the runner into a reference cycle,
        # and an unloaded model's weights would wait for a garbage collection to be freed
        self._coverage = partial(SpeechCoverage, self.vad if self.options.speech_coverage else None, self.totals)
        self.threads = torch.get_num_threads()  # the engine's intra-op threads, as configured at its build
        # a long request holds WINDOWS_IN_FLIGHT windows at once at most (longform.py)
        self.collator = Collator(self.parts, self.options, self.vad, self._coverage, vad_workers=self.threads,
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
        return RunnerStats(streams=len(self.streams), streams_spoken=sum(s.spoken for s in self.streams.values()),
                           decode_slots_used=self.batch.num_rows,
                           decode_slots_capacity=self.planner.max_rows,
                           stream_passes_total=self.totals.passes,
                           stream_encoded_seconds_total=self.totals.encoded_s,
                           stream_passes_shed_total=self.stream_passes.passes_shed,
                           stream_passes_late_total=self.planner.passes_late,
                           stream_passes_skipped_total=self.stream_passes.passes_skipped,
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
            stream = StreamingTranscription(r, self.parts, self.options.stream_window_s,
                                            fit_context=self.options.stream_encoder_context == "fit",
                                            coverage=self._coverage(), totals=self.totals)
            self.active[r.request_id] = stream
            self.streams[r.request_id] = stream
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
        return any(s.ready(self.step_samples) for s in self.streams.values())

    def release(self, request: Request) -> None:
        self.collating = [r for r in self.collating if r is not request]
        self.collating_beside.release(request)  # its collation is dropped when it comes back
        self._end_stream(request.request_id)
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
        (encoder) or rows (decoder), see `_live_share`."""
        outputs: list[RequestOutput] = []
        if self.collating:
            with stage_timer("offline.collate"):
                self._collate(outputs)
        self._collect_collated(outputs)
        if self.streams:
            self._start_stream_passes(outputs)
        self._collect_encoded(outputs)
        thread = self.encoder_thread
        if thread is not None and not thread.busy and self.planner.may_encode_beside(self.batch):
            jobs = self.planner.take_encode(self.batch)
            if jobs:
                self.planner.encoding.extend(jobs)
                thread.start(jobs)
        elif thread is None or not thread.busy or self.planner.final_first():
            # a final pass does not wait for the encoder thread's batch: the client waits on it
            jobs = self.planner.take_encode(self.batch, self._streams_live()) if self.planner.may_encode(self.batch) else []
            if jobs:
                with shared_stage_timer("encode", _live_share(jobs, lambda j: j.mel.shape[1])):
                    self._encode(jobs, outputs)
        # a prefill's large matmuls (the cross K/V of whole windows) take every thread unless the
        # encoder thread holds one; the per-token steps run on DECODE_THREADS
        with self.step_threads.narrowed() if thread is not None and thread.busy else nullcontext():
            self._join(self.planner.take_join(self.batch, self.active), outputs)
        self.streams_stepped = len({id(g.job.owner) for g in self.batch.groups if not g.done and g.job.live})
        narrow = self.step_threads.narrow(encoder_busy=thread is not None and thread.busy,
                                          live_rows=self.streams_stepped > 0)
        with self.step_threads.narrowed() if narrow else nullcontext():
            self.planner.steps_since_encode += 1
            decoding = [g.job for g in self.batch.groups if not g.done]
            with shared_stage_timer("decode", _live_share(decoding, lambda j: j.rows)) if self.batch.groups else nullcontext():
                finished = self.batch.step(lambda g, exc: self._fail(g.job.owner, "decode", exc, outputs))
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
                self._end_stream(job.request_id)
        for nxt in update.jobs:
            self.planner.submit(nxt)

    def _start_stream_passes(self, outputs: list[RequestOutput]) -> None:
        """Every stream with enough new audio (or at its end) gets a pass; their windows'
        features are extracted in one call and they join the encoder queue together."""
        with stage_timer("streaming.schedule"):
            passes, ended, behind = self.stream_passes.pick(self.streams.values(), self.planner, self._withdraw)
        for stream in behind:  # the backlog decodes as offline segments (catchup.py)
            with stage_timer("streaming.features"):  # VAD cuts and segment features
                try:
                    jobs, output = stream.start_catch_up(self.vad)
                except Exception as exc:
                    self._fail(stream, "catchup", exc, outputs)
                    continue
            for job in jobs:
                self.planner.submit(job)
            if output is not None:
                outputs.append(output)
        for stream in ended:  # nothing left to decode: the final is what is committed
            stream.final_done = True
            outputs.append(stream.on_empty_end())
            self.active.pop(stream.request.request_id, None)
            self._end_stream(stream.request.request_id)
        if not passes:
            return
        with stage_timer("streaming.features"):
            try:
                mels = self.parts.features([audio for _, audio in passes])
            except Exception as exc:
                for stream, _ in passes:
                    self._fail(stream, "features", exc, outputs)
                return
        for (stream, _), mel in zip(passes, mels):
            job = stream.make_job(mel.to(self.parts.dtype))
            job.patience_samples = stream.pass_samples(self.step_samples)
            job.stream_request = stream.request
            self.planner.submit(job)

    def _streams_live(self) -> bool:
        """Some stream runs live passes that offline windows yield to; a stream catching up
        decodes offline windows of its own, which need not yield to themselves."""
        return any(s.catch_up is None for s in self.streams.values())

    def _end_stream(self, request_id: str) -> None:
        if self.streams.pop(request_id, None) is not None:
            self.stream_passes.release(request_id)

    def _withdraw(self, job: WindowJob) -> None:
        self.planner.drop(job)
        self.batch.remove_job(job)

    def _collect_encoded(self, outputs: list[RequestOutput]) -> None:
        """Take the encoder thread's batch once it is done, or wait for it when the decoder has
        nothing to step meanwhile. Windows dropped while it ran (a superseded pass, a released
        request) are discarded; a failed batch is encoded again here, one window at a time."""
        thread = self.encoder_thread
        if thread is None or not thread.busy:
            return
        if not thread.done() and (self.batch.groups or self.planner.prefill_queue):
            return
        with stage_timer("streaming.encode"):  # the wait, not the encoder's time (the thread takes live passes only)
            jobs, feats, exc = thread.collect()
        wanted = self.planner.still_encoding(jobs)
        if exc is not None:
            logger.warning("encoder batch of %d failed (%s); retrying one by one", len(jobs), exc)
            self._encode_one_by_one([j for j, keep in zip(jobs, wanted) if keep], outputs)
            return
        assert feats is not None
        self._encoded([j for j, keep in zip(jobs, wanted) if keep], [f for f, keep in zip(feats, wanted) if keep])

    def _encode(self, jobs: list[WindowJob], outputs: list[RequestOutput]) -> None:
        """Encode `jobs` in one batch (one by one if the batch fails: only the culprit fails)."""
        try:
            feats: list[Tensor | None] = list(self.parts.context.encode([j.mel for j in jobs]))
        except Exception as exc:
            logger.warning("encoder batch of %d failed (%s); retrying one by one", len(jobs), exc)
            self._encode_one_by_one(jobs, outputs)
            return
        self._encoded(jobs, feats)

    def _encode_one_by_one(self, jobs: list[WindowJob], outputs: list[RequestOutput]) -> None:
        """Encode `jobs` one at a time after their batch failed: a window that fails again fails its request."""
        feats: list[Tensor | None] = []
        for j in jobs:
            try:
                feats.append(self.parts.context.encode([j.mel])[0])
            except Exception as one_exc:
                feats.append(None)
                self._fail(j.owner, "encode", one_exc, outputs)
        self._encoded(jobs, feats)

    def _encoded(self, jobs: list[WindowJob], feats: list[Tensor | None]) -> None:
        """Encoded windows (None: failed) wait to join the decoder, their language detected."""
        encoded = [j for j, f in zip(jobs, feats) if f is not None]
        for j, f in zip(jobs, feats):
            j.audio_features = f
        needs = [j for j in encoded if j.owner.needs_language()]
        for j, code in zip(needs, self.parts.detect_languages([j.audio_features for j in needs])):  # type: ignore[misc]
            j.owner.set_language(code)
            j.refresh_prefix()
        self.planner.encoded(encoded)

    def _join(self, jobs: list[WindowJob], outputs: list[RequestOutput]) -> None:
        """Prefill `jobs` into the decoder batch: live passes together, offline windows together
        (one by one if that fails). Live rows attend to the shared silence once for all rows;
        offline rows hold their whole context, so no transcript depends on its batch mates."""
        for live in (True, False):
            group = [j for j in jobs if j.live == live]
            if not group:
                continue
            # windows of one length attend in one call where they attend per length (offline rows,
            # prefills: DecoderCache.item_runs)
            group.sort(key=lambda j: j.audio_positions)
            try:
                with stage_timer("streaming.decode" if live else "offline.prefill"):  # no streaming.prefill stage
                    self._prefill(group, shared_silence=live)
            except Exception as exc:
                logger.warning("prefill of %d windows failed (%s); retrying one by one", len(group), exc)
                for j in group:
                    try:
                        self._prefill([j], shared_silence=live)
                    except Exception as one_exc:
                        self._fail(j.owner, "decode", one_exc, outputs)

    def _prefill(self, jobs: list[WindowJob], shared_silence: bool) -> None:
        parts = self.parts
        groups = [DecodeGroup.for_job(j, parts.rules, parts.dims.n_text_ctx) for j in jobs]
        cross = self.batch.join(groups, [j.audio_features for j in jobs], [j.audio_positions for j in jobs],  # type: ignore[misc]
                                parts.silence_kv(jobs), shared_silence=shared_silence,
                                projected=[j.cross_kv for j in jobs])
        for job, kv in zip(jobs, cross):
            if job.live:  # a live pass aligns its words over the same window (offline jobs do not keep theirs)
                job.cross_kv = kv

    def _fail(self, state: WindowOwner, stage: str, exc: Exception, outputs: list[RequestOutput]) -> None:
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


def _live_share(jobs: list[WindowJob], weight: Callable[[WindowJob], int]) -> float:
    """The fraction of a batch's work that is live passes, each job weighted by `weight` (its mel
    frames for the encoder, its rows for the decoder); 0 for an empty batch."""
    total = sum(weight(j) for j in jobs)
    return sum(weight(j) for j in jobs if j.live) / total if total else 0.0
