"""Whisper model runner: admitted requests become window jobs; each `execute()` encodes the
waiting windows in one batch, joins them to the running decoder batch, and decodes one token
for every row (continuous batching)."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from engine.config import EngineConfig
from engine.device import resolve_device, resolve_dtype
from engine.errors import InvalidRequestError, UnsupportedError
from engine.models.whisper.batch import DecodeBatch
from engine.models.whisper.build import build_model
from engine.models.whisper.context import ContextEncoder
from engine.models.whisper.decoding import TokenRules, WindowResult
from engine.models.whisper.features import SAMPLE_RATE, LogMelExtractor
from engine.models.whisper.jobs import OfflineTranscription, WindowJob, keyword_tokens
from engine.models.whisper.streaming import StreamingTranscription
from engine.models.whisper.tokenizer import WhisperTokenizer
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput

logger = logging.getLogger(__name__)

DECODE_THREADS = 1  # torch intra-op threads for decoder steps on CPU (see WhisperRunner._decode_threads)

ENCODE_EVERY_STEPS = 32  # decoder steps after which waiting windows are encoded even mid-decode
LIVE_ENCODE_FRAMES = 2000
"""Mel frames of interim live passes encoded in one step (~0.2 s on 2 CPU cores): a larger batch
keeps the engine loop from starting the final pass of a stream whose audio just ended."""


class WhisperRunner:
    supports_streaming = True  # by re-decoding a sliding window (see streaming.py)
    sample_rate = SAMPLE_RATE

    def __init__(self, config: EngineConfig):
        self.config = config
        self.device = resolve_device(config)
        self.dtype = resolve_dtype(config, self.device)
        self.ckpt_dir = config.resolved_ckpt_dir()
        model, ckpt = build_model(self.ckpt_dir, config, self.device, self.dtype)
        self.ckpt_format = ckpt.format
        self.dims = ckpt.dims
        self.model = model
        assert ckpt.tokenizer_file is not None
        self.tokenizer = WhisperTokenizer(ckpt.tokenizer_file, ckpt.dims.n_vocab, model.num_languages,
                                          model.is_multilingual)
        self.alignment_heads = ckpt.alignment_heads or self._default_alignment_heads()
        self.rules = TokenRules.for_tokenizer(self.tokenizer, ckpt.dims.n_vocab, ckpt.suppress_ids,
                                              ckpt.suppress_ids_begin, self.device)
        self.features = LogMelExtractor(ckpt.dims.n_mels, self.device)
        self.context_encoder = ContextEncoder(model.encoder)
        self._silence: tuple[list[Tensor], list[Tensor]] | None = None
        self.batch = DecodeBatch(model.decoder, self.tokenizer.no_speech, self.device)
        self.encode_queue: deque[WindowJob] = deque()
        self.prefill_queue: deque[WindowJob] = deque()
        self.deferred: list[tuple[WindowJob, WindowResult]] = []  # interim results held while finals decode
        self.active: dict[str, OfflineTranscription | StreamingTranscription] = {}
        self.streams: dict[str, StreamingTranscription] = {}
        self.step_samples = int(config.stream_step_ms * SAMPLE_RATE / 1000)
        self.steps_since_encode = 0
        self.max_rows = max(config.max_decode_rows, config.max_batch_size)
        self.streams_stepped = 0
        logger.info("whisper %s loaded from %s (%s) on %s/%s, quantization=%s", self.model_name, self.ckpt_dir,
                    ckpt.format, self.device, self.dtype, config.quantization)

    # ---- facts ----

    @property
    def model_name(self) -> str:
        sizes = {384: "tiny", 512: "base", 768: "small", 1024: "medium", 1280: "large"}
        name = sizes.get(self.dims.n_audio_state, f"d{self.dims.n_audio_state}")
        return name if self.model.is_multilingual else f"{name}.en"

    def info(self) -> dict[str, Any]:
        return {
            "family": "whisper",
            "model": self.model_name,
            "checkpoint": self.ckpt_dir,
            "checkpoint_format": self.ckpt_format,
            "multilingual": self.model.is_multilingual,
            "languages": list(self.tokenizer.languages),
            "tasks": ["transcribe", "translate"] if self.model.is_multilingual else ["transcribe"],
            "sample_rate": self.sample_rate,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "quantization": self.config.quantization,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "streaming": self.supports_streaming,
            "max_batch_size": self.config.max_batch_size,
        }

    def _default_alignment_heads(self) -> list[tuple[int, int]]:
        # without a table, use every head of the upper half of the decoder (openai's default)
        n, h = self.dims.n_text_layer, self.dims.n_text_head
        return [(layer, head) for layer in range(n // 2, n) for head in range(h)]

    # ---- admission ----

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        multilingual = self.model.is_multilingual
        if options.task == "translate" and not multilingual:
            raise UnsupportedError(
                f"model {self.model_name} is English-only: task='translate' needs a multilingual checkpoint"
            )
        if options.language is not None:
            lang = options.language.lower()
            if not multilingual and lang != "en":
                raise UnsupportedError(
                    f"model {self.model_name} is English-only: language {options.language!r} is not supported "
                    "(use 'en' or a multilingual checkpoint)"
                )
            if multilingual and lang not in self.tokenizer.language_tokens:
                raise InvalidRequestError(f"unknown language {options.language!r}")
        if options.prompt is not None and len(self.tokenizer.encode(options.prompt)) > self.dims.n_text_ctx // 2:
            raise InvalidRequestError(f"prompt is longer than {self.dims.n_text_ctx // 2} tokens")
        keywords = len(keyword_tokens(self.tokenizer, options.keywords))
        if keywords > self.dims.n_text_ctx // 4:  # they head every window's prompt: leave room for the text
            raise InvalidRequestError(f"keywords take {keywords} tokens; at most {self.dims.n_text_ctx // 4} fit "
                                      "Whisper's prompt")

    def free_slots(self) -> int:
        # live streams are bounded by the server's inflight permits, not by batch slots: an idle
        # stream waiting for audio must not keep offline work out
        return max(0, self.config.max_batch_size - (len(self.active) - len(self.streams)))

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        failed: list[RequestOutput] = []
        for r in (r for r in requests if r.streaming):
            stream = StreamingTranscription(r, self)
            self.active[r.request_id] = stream
            self.streams[r.request_id] = stream
        requests = [r for r in requests if not r.streaming]
        if not requests:
            return failed
        audios = [r.audio for r in requests]
        try:
            mels = self.features(audios)  # type: ignore[arg-type]
        except Exception as exc:  # isolate: extract one by one
            logger.warning("batched feature extraction failed (%s); retrying one by one", exc)
            mels = []
            for r in requests:
                try:
                    mels.append(self.features([r.audio])[0])  # type: ignore[list-item]
                except Exception as one_exc:
                    mels.append(None)  # type: ignore[arg-type]
                    failed.append(_error_output(r, "features", one_exc))
        for request, mel in zip(requests, mels):
            if mel is None:
                continue
            state = OfflineTranscription(request, mel.to(self.dtype), self)
            self.active[request.request_id] = state
            job = state.next_job()
            if job is None:
                failed.append(state.finish())
                del self.active[request.request_id]
            else:
                self.encode_queue.append(job)
        return failed

    def _drop_job(self, job: WindowJob) -> None:
        self.encode_queue = deque(j for j in self.encode_queue if j is not job)
        self.prefill_queue = deque(j for j in self.prefill_queue if j is not job)
        self.deferred = [(j, r) for j, r in self.deferred if j is not job]
        self.batch.remove_job(job)

    def release(self, request: Request) -> None:
        self.streams.pop(request.request_id, None)
        state = self.active.pop(request.request_id, None)
        if state is None:
            return
        self.encode_queue = deque(j for j in self.encode_queue if j.owner is not state)
        self.prefill_queue = deque(j for j in self.prefill_queue if j.owner is not state)
        self.deferred = [(j, r) for j, r in self.deferred if j.owner is not state]
        for g in list(self.batch.groups):
            if g.job.owner is state:  # type: ignore[attr-defined]
                self.batch.remove_job(g.job)

    def has_work(self) -> bool:
        if self.encode_queue or self.prefill_queue or self.batch.groups or self.deferred:
            return True
        return any(self._stream_ready(s) for s in self.streams.values())

    def _stream_ready(self, stream: StreamingTranscription) -> bool:
        return stream.ready()  # at the cadence of the stream's delay

    def shutdown(self) -> None:
        self.active.clear()
        self.streams.clear()
        self.encode_queue.clear()
        self.prefill_queue.clear()
        self.deferred.clear()
        self.batch = DecodeBatch(self.model.decoder, self.tokenizer.no_speech, self.device)

    # ---- execution ----

    @torch.inference_mode()
    def execute(self) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        self._start_stream_passes(outputs)
        if self._may_encode():
            self._encode_waiting(outputs)
        with self._decode_threads():
            self._join_ready(outputs)
            self.steps_since_encode += 1
            self.streams_stepped = len({id(g.job.owner) for g in self.batch.groups  # type: ignore[attr-defined]
                                        if not g.done and _live(g.job)})
            finished = self.batch.step(lambda g, exc: self._fail(g.job.owner, "decode", exc, outputs))  # type: ignore[attr-defined]
        done = [(cast(WindowJob, g.job), g.result) for g in finished if g.result is not None]
        if self._finals_pending():  # an interim pass's word alignment can wait; the finals cannot
            self.deferred.extend((j, r) for j, r in done if _interim(j))
            done = [(j, r) for j, r in done if not _interim(j)]
        else:
            done, self.deferred = [*self.deferred, *done], []
        for job, result in done:
            state = job.owner
            if state.request.request_id not in self.active:
                continue
            try:
                nxt, out = state.on_window_done(job, result)
            except Exception as exc:
                logger.exception("post-processing failed for %s", state.request.request_id)
                self._fail(state, "postprocess", exc, outputs)
                continue
            if out is not None:
                outputs.append(out)
                if out.finished:
                    self.active.pop(state.request.request_id, None)
                    self.streams.pop(state.request.request_id, None)
            if nxt is not None:
                (self.prefill_queue if nxt.audio_features is not None else self.encode_queue).append(nxt)
        return outputs

    def _start_stream_passes(self, outputs: list[RequestOutput]) -> None:
        """Every stream with enough new audio (or at its end) gets a pass; their windows'
        features are extracted in one call and they join the encoder queue together."""
        for stream in self.streams.values():
            stale = stream.superseded_pass()
            if stale is not None:
                self._drop_job(stale)
                stream.drop_pass()
        ready = [s for s in self.streams.values() if self._stream_ready(s)]
        if not ready:
            return
        passes: list[tuple[StreamingTranscription, np.ndarray]] = []
        for stream in ready:
            stream.absorb()
            audio = stream.window_audio()
            if audio.size == 0:
                if stream.request.input_finished:  # nothing left to decode: the final is what is committed
                    stream.final_done = True
                    outputs.append(stream.on_empty_end())
                    self.active.pop(stream.request.request_id, None)
                    self.streams.pop(stream.request.request_id, None)
                continue
            passes.append((stream, audio))
        if not passes:
            return
        try:
            mels = self.features([audio for _, audio in passes])
        except Exception as exc:
            for stream, _ in passes:
                self._fail(stream, "features", exc, outputs)
            return
        for (stream, _), mel in zip(passes, mels):
            job = stream.make_job(mel.to(self.dtype))
            if job.final:  # the client is waiting for this one: ahead of interim passes
                self.encode_queue.appendleft(job)
            else:
                self.encode_queue.append(job)

    def _may_encode(self) -> bool:
        """Encode new windows when the decoder batch has drained, or after ENCODE_EVERY_STEPS
        decoder steps. An encoder batch costs as much as dozens of decoder steps on a CPU, so
        encoding at every step would stretch each running decode to one token per encoder
        batch; alternating keeps passes short (live streams) and rows full (offline)."""
        if not self.batch.groups or self.steps_since_encode >= ENCODE_EVERY_STEPS:
            return True
        return bool(self.encode_queue) and self.encode_queue[0].final  # a client waits on it

    @contextlib.contextmanager
    def _decode_threads(self) -> Iterator[None]:
        """Run the decoder's per-token work on DECODE_THREADS intra-op threads (CPU). A step is a
        hundred-odd tiny ops; with several OpenMP threads each op ends in a barrier that waits a
        whole scheduler slice whenever another process or the server's own threads hold a core.
        The encoder's large matmuls keep every thread."""
        before = torch.get_num_threads()
        if self.device.type != "cpu" or before <= DECODE_THREADS:
            yield
            return
        torch.set_num_threads(DECODE_THREADS)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def _finals_pending(self) -> bool:
        """A live stream's final pass is encoded and waiting or decoding: a client waits on it."""
        return any(j.final for j in self.prefill_queue) or any(
            g.job.final for g in self.batch.groups if not g.done)  # type: ignore[attr-defined]

    def _encode_waiting(self, outputs: list[RequestOutput]) -> None:
        budget = self.max_rows - self.batch.num_rows - sum(j.rows for j in self.prefill_queue)
        jobs: list[WindowJob] = []
        live_frames = 0
        # a client waits on every final pass: no new interim pass joins the decoder until they are done
        final_waiting = self._finals_pending()
        while self.encode_queue and len(jobs) < self.config.max_batch_size and self.encode_queue[0].rows <= budget:
            job = self.encode_queue[0]
            if not job.final and job.audio_positions < self.dims.n_audio_ctx:  # an interim live pass
                if final_waiting or (live_frames and live_frames + job.mel.shape[1] > LIVE_ENCODE_FRAMES):
                    break
                live_frames += job.mel.shape[1]
            self.encode_queue.popleft()
            budget -= job.rows
            jobs.append(job)
        if not jobs:
            return
        self.steps_since_encode = 0
        try:
            feats = self.context_encoder.encode([j.mel for j in jobs])
        except Exception as exc:
            logger.warning("encoder batch of %d failed (%s); retrying one by one", len(jobs), exc)
            feats_list: list[Tensor | None] = []
            for j in jobs:
                try:
                    feats_list.append(self.context_encoder.encode([j.mel])[0])
                except Exception as one_exc:
                    feats_list.append(None)
                    self._fail(j.owner, "encode", one_exc, outputs)
            for j, f in zip(jobs, feats_list):
                if f is not None:
                    j.audio_features = f
                    self.prefill_queue.append(j)
            return
        for i, j in enumerate(jobs):
            j.audio_features = feats[i]
        self._detect_languages([j for j in jobs if j.owner.needs_language()])
        self.prefill_queue.extend(jobs)

    def _detect_languages(self, jobs: list[WindowJob]) -> None:
        if not jobs:
            return
        feats = torch.stack([j.audio_features for j in jobs])  # type: ignore[misc]
        cache = self.model.decoder.new_cache(feats, capacity=1)
        tok = torch.full((len(jobs), 1), self.tokenizer.sot, device=self.device)
        pos = torch.zeros_like(tok)
        logits = self.model.decoder(tok, pos, cache)[:, 0]
        lang_ids = torch.tensor(list(self.tokenizer.language_tokens.values()), device=self.device)
        best = logits[:, lang_ids].argmax(dim=-1).tolist()
        codes = list(self.tokenizer.language_tokens)
        for j, b in zip(jobs, best):
            j.owner.set_language(codes[b])
            j.refresh_prefix()

    def _join_ready(self, outputs: list[RequestOutput]) -> None:
        budget = self.max_rows - self.batch.num_rows
        jobs: list[WindowJob] = []
        held: list[WindowJob] = []
        finals_first = self._finals_pending()
        while self.prefill_queue and self.prefill_queue[0].rows <= budget:
            job = self.prefill_queue.popleft()
            if job.owner.request.request_id not in self.active:
                continue
            if finals_first and _interim(job):  # every decoder step it adds delays the finals
                held.append(job)
                continue
            budget -= job.rows
            jobs.append(job)
        self.prefill_queue.extendleft(reversed(held))
        if not jobs:
            return
        groups = [j.new_group(self.rules) for j in jobs]
        try:
            self.batch.join(groups, [j.audio_features for j in jobs], [j.audio_positions for j in jobs],  # type: ignore[misc]
                            self.silence_kv(jobs))
        except Exception as exc:
            logger.warning("prefill of %d groups failed (%s); retrying one by one", len(groups), exc)
            for j in jobs:
                try:
                    self.batch.join([j.new_group(self.rules)], [j.audio_features], [j.audio_positions],  # type: ignore[list-item]
                                    self.silence_kv([j]))
                except Exception as one_exc:
                    self._fail(j.owner, "decode", one_exc, outputs)

    def silence_kv(self, jobs: list[WindowJob]) -> tuple[list[Tensor], list[Tensor]] | None:
        """The decoder's cross K/V of encoded silence, once any job holds a short ('fit') context."""
        full = self.dims.n_audio_ctx
        if all(j.audio_positions >= full for j in jobs):
            return None
        if self._silence is None:
            self._silence = self.model.decoder.silence_kv(self.context_encoder.silence(jobs[0].mel))
        return self._silence

    def _fail(self, state: OfflineTranscription | StreamingTranscription, stage: str, exc: Exception, outputs: list[RequestOutput]) -> None:
        rid = state.request.request_id
        if rid not in self.active:
            return
        logger.error("request %s failed at %s: %s", rid, stage, exc)
        self.release(state.request)
        outputs.append(_error_output(state.request, stage, exc))


def _live(job: WindowJob) -> bool:
    """A pass of a live stream, interim or final."""
    return isinstance(job.owner, StreamingTranscription)


def _interim(job: WindowJob) -> bool:
    """An interim pass of a live stream (a partial result nobody waits on)."""
    return _live(job) and not job.final


def _error_output(request: Request, stage: str, exc: Exception) -> RequestOutput:
    return RequestOutput(
        request_id=request.request_id,
        finished=True,
        finish_reason="error",
        error=f"{type(exc).__name__}: {exc}",
        error_stage=stage,
        duration=request.duration,
    )


