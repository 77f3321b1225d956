"""The NeMo model runner: offline requests, cache-aware streams and buffered streams, each kind
advanced in one batched forward per engine step.

Per `execute()`:
1. ingest: audio queued since the last step becomes mel frames (cache-aware streams) or window
   samples (buffered streams);
2. offline: up to `max_batch_size` whole utterances through the model at once (those up to
   `long_audio_seconds`; a longer one runs as buffered windows, step 3, and reports once);
3. streams: every stream with a runnable step (least recently advanced first, up to
   `max_batch_size`) advances by one chunk (cache-aware) or one window (buffered) in one forward,
   then one batched decode; partial outputs, or the final one when its input is exhausted.
A stream's state (KV blocks, state slot) is released when it finishes, fails or is aborted.
The job table, the pick and release are the chunked-stream skeleton's (engine/streaming/chunked.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from engine.cache import BlockPool, BlockTable, KVSpec, plan_pool
from engine.config import EngineConfig
from engine.device import resolve_device, resolve_dtype
from engine.errors import InvalidRequestError
from engine.metrics import stage_timer
from engine.models.nemo.beam import new_beam
from engine.models.nemo.buffered import BufferedEncoder, BufferedSchedule, BufferedStream
from engine.models.nemo.cache_aware import CONV_CACHE, CacheAwareEncoder, CacheAwareStream, StreamGeometry
from engine.models.nemo.checkpoint import NemoCheckpoint, load_checkpoint
from engine.models.nemo.ctc import CtcDecoder
from engine.models.nemo.decode import BatchDecoder, DecodeState, transducer_slot_shapes
from engine.models.nemo.frontend import MelStream
from engine.models.nemo.info import NemoSettings, decode_methods, frame_seconds, max_beam, model_info
from engine.models.nemo.options import NemoOptions, check_stream_context, request_context
from engine.models.nemo.outputs import Hypothesis, OutputBuilder
from engine.models.nemo.state_slots import StateSlots
from engine.request import Request, error_output
from engine.runner import ModelInfo, RunnerStats
from engine.streaming.chunked import ChunkedStreamRunner
from engine.types import DecodingOptions, FinishReason, RequestOutput

logger = logging.getLogger(__name__)

Mode = Literal["offline", "cache_aware", "buffered"]


@dataclass(eq=False)
class _Job:
    request: Request
    mode: Mode
    decode: DecodeState
    ca: CacheAwareStream | None = None
    buf: BufferedStream | None = None
    last_advanced: int = -1
    tentative: Hypothesis | None = None
    """A buffered stream's right-context tokens of its last step (shown, never committed)."""


class NemoRunner(ChunkedStreamRunner[_Job]):
    def __init__(
        self, ckpt: NemoCheckpoint, config: EngineConfig, options: NemoOptions, device: torch.device
    ) -> None:
        super().__init__(config)
        self.ckpt, self.options, self.device = ckpt, options, device
        cfg = ckpt.config
        enc = cfg.encoder
        self.sample_rate = cfg.mel.sample_rate
        self.frame_seconds = frame_seconds(cfg)
        self.settings = s = NemoSettings.of(ckpt.path, cfg, config, options)
        self.method = self._decode_method(s.method)
        self.look_ahead = s.look_ahead
        self.streaming_kind: Mode | None = s.streaming_kind  # type: ignore[assignment]
        if s.look_ahead is not None and s.streaming_kind is None:
            logger.warning("%s normalises features per utterance: served offline only", ckpt.path)
        self.supports_streaming = self.streaming_kind is not None
        self.presets, self.default_context = s.presets, s.default_context
        frame_samples = round(self.frame_seconds * self.sample_rate)
        self.stream_chunk_samples = frame_samples * (
            self.look_ahead[1] + 1 if self.look_ahead is not None else self.default_context[1]
        )
        """One streaming chunk of audio: the cache-aware chunk, or the buffered default chunk."""
        dtype = next(ckpt.model.parameters()).dtype
        shapes = transducer_slot_shapes(ckpt.model)
        self.pool: BlockPool | None = None
        self.ca_encoder: CacheAwareEncoder | None = None
        self.geometry: StreamGeometry | None = None
        if self.streaming_kind == "cache_aware" and self.look_ahead is not None:
            geo = self.geometry = StreamGeometry.of(enc, self.look_ahead)
            assert geo.num_left_chunks + 1 == s.blocks_per_stream
            shapes[CONV_CACHE] = (enc.n_layers, enc.d_model, enc.conv_context[0])
            self.blocks_per_stream = s.blocks_per_stream
            spec = KVSpec(enc.n_layers, enc.n_heads, enc.head_dim, dtype)
            plan_pool(  # refuses a pool that cannot hold one stream, and logs its size
                spec, geo.out_frames, min_blocks=self.blocks_per_stream, blocks_per_seq=self.blocks_per_stream,
                sequences=s.max_streams, max_num_blocks=s.planned_blocks, device=device,
                gpu_memory_utilization=config.gpu_memory_utilization, cpu_cache_bytes=config.cpu_cache_bytes,
            )  # fmt: skip
            self.pool = BlockPool(spec, s.kv_blocks, geo.out_frames, device)
        self.slots = StateSlots(s.max_streams, shapes, dtype, device)
        if self.pool is not None and self.geometry is not None:
            self.ca_encoder = CacheAwareEncoder(ckpt.model.encoder, self.geometry, self.pool, self.slots)
        self.buffered_encoder = BufferedEncoder(ckpt)
        tr_cfg = cfg.transducer
        self.decoder = BatchDecoder(ckpt.model, self.method, self.slots, tr_cfg.max_symbols if tr_cfg else 0,
                                    tr_cfg.beam_max_symbols if tr_cfg else 0)  # fmt: skip
        self.outputs = OutputBuilder(ckpt.tokenizer, self.frame_seconds)

    @classmethod
    def from_config(cls, config: EngineConfig, options: NemoOptions | None = None) -> NemoRunner:
        device = resolve_device(config)
        ckpt = load_checkpoint(config.resolved_ckpt_dir(), config.checkpoint_name, device,
                               resolve_dtype(config, device))
        return cls(ckpt, config, options or NemoOptions(), device)

    def _decode_method(self, method: str) -> str:
        methods = decode_methods(self.ckpt.config)
        if method not in methods:
            raise InvalidRequestError(  # worded as the engine's own check (it cannot run before the runner exists)
                f"decode_method {method!r} is not offered by this nemo model (it offers: {', '.join(methods)})"
            )
        return method

    # ---- ModelRunner protocol ----

    def info(self) -> ModelInfo:
        return model_info(self.ckpt.config, self.settings, sum(p.numel() for p in self.ckpt.model.parameters()))

    @property
    def max_beam(self) -> int:
        """Widest beam served: CTC prefix beam search, or the transducer's malsd_batch."""
        return max_beam(self.method)

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        if options.stream_context is not None:  # buffered only (Capabilities.stream_context)
            check_stream_context(self.ckpt.config.encoder, options.stream_context)

    def free_slots(self) -> int:
        return self.slots.num_free - sum(1 for j in self._jobs.values() if j.mode == "offline")

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        failed = []
        for req in requests:
            mode: Mode = self.streaming_kind if (req.streaming and self.streaming_kind) else "offline"
            long_offline = not req.streaming and req.duration > self.options.long_audio_seconds
            if long_offline:
                mode = "buffered"
            ctc = beam = None
            keywords = [k for k in (self.ckpt.tokenizer.encode(w) for w in req.decoding.keywords) if k]
            if self.method == "ctc":
                ctc = CtcDecoder(req.decoding.beam_size, keywords, self.options.keyword_boost)
            elif req.decoding.beam_size > 1 or keywords:
                beam = new_beam(self.decoder.net, req.decoding.beam_size, keywords, self.options.keyword_boost)
            state = DecodeState(hyp=None if ctc or beam else Hypothesis(), ctc=ctc, beam=beam)
            job = _Job(req, mode, state)
            if mode != "offline":
                slot = self.slots.allocate()
                if slot is None:
                    failed.append(error_output(req, "admission", "no free stream slot"))
                    continue
                state.slot = slot
                if mode == "cache_aware":
                    assert self.geometry is not None
                    job.ca = CacheAwareStream(MelStream(self.ckpt.frontend), BlockTable(self.geometry.out_frames),
                                              slot, torch.zeros(self.ckpt.config.mel.n_mels, 0))  # fmt: skip
                elif long_offline:
                    job.buf = self._long_offline_stream(req)
                else:
                    job.buf = self._buffered_stream(req.decoding)
            self._register(job)
        return failed

    def _buffered_stream(self, options: DecodingOptions) -> BufferedStream:
        ctx = request_context(
            self.ckpt.config.encoder, self.default_context, options.stream_context, options.delay
        )
        frame = round(self.frame_seconds * self.sample_rate)
        return BufferedStream(BufferedSchedule(ctx[0] * frame, ctx[1] * frame, ctx[2] * frame, frame), ctx)

    def _long_offline_stream(self, req: Request) -> BufferedStream:
        """A long offline request as NeMo's buffered inference: windows of `long_window_seconds`
        over its audio, each under the model's offline attention context (what the whole-file
        forward uses), the decoder state carried from window to window."""
        frame = round(self.frame_seconds * self.sample_rate)
        left, chunk, right = (max(0, round(s / self.frame_seconds)) for s in self.options.long_window_seconds)
        chunk = max(chunk, 1)
        stream = BufferedStream(BufferedSchedule(left * frame, chunk * frame, right * frame, frame), (left, chunk, right),
                                attention=list(self.offline_context))  # fmt: skip
        stream.add_audio(torch.from_numpy(np.asarray(req.audio, dtype=np.float32).reshape(-1)))
        return stream

    @property
    def offline_context(self) -> tuple[int, ...]:
        """The attention context of an offline forward: the trained look-ahead in use, else the
        encoder's first (its default)."""
        return self.look_ahead if self.look_ahead is not None else self.ckpt.config.encoder.att_context_sizes[0]

    def has_work(self) -> bool:
        return any(j.mode == "offline" or self._needs_ingest(j) or self._ready(j) or self._exhausted(j)
                   for j in self._jobs.values())  # fmt: skip

    def _needs_ingest(self, job: _Job) -> bool:
        """Audio waiting, or a cache-aware stream whose end of input has not been turned into frames."""
        req = job.request
        if job.mode == "offline":
            return False
        return bool(req.pending_samples) or (
            req.input_finished and job.ca is not None and not job.ca.finished
        )

    def _free(self, job: _Job) -> None:
        if job.ca is not None and self.pool is not None:
            job.ca.table.release(self.pool)
        if job.decode.slot is not None:
            self.slots.free(job.decode.slot)

    def _cache_stats(self) -> RunnerStats:
        return RunnerStats(
            kv_blocks_used=self.pool.num_blocks - self.pool.num_free if self.pool else 0,
            kv_blocks_capacity=self.pool.num_blocks if self.pool else 0,
            decode_slots_used=self.slots.num_slots - self.slots.num_free,
            decode_slots_capacity=self.slots.num_slots,
        )

    # ---- one engine step ----

    def _before_streams(self) -> list[RequestOutput]:
        """The offline batch, then the streams whose input is exhausted (no step left)."""
        outputs: list[RequestOutput] = []
        offline = [j for j in self._jobs.values() if j.mode == "offline"][: self.config.max_batch_size]
        if offline:
            outputs += self._run_offline(offline)
        done = [j for j in self._jobs.values() if self._exhausted(j)]
        return outputs + [self._finish(j, "stop") for j in done]

    def _run_streams(self, batch: list[_Job]) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        for kind in (True, False):  # cache-aware chunks and buffered windows are separate forwards
            group = [j for j in batch if (j.ca is not None) == kind]
            if group:
                outputs += self._run_group(group)
        return outputs

    @staticmethod
    def _input_ended(req: Request) -> bool:
        """All of the request's audio is with its stream (a long offline request: from the start)."""
        return (req.input_finished or not req.streaming) and not req.pending_samples

    def _ready(self, job: _Job) -> bool:
        if job.mode == "offline":
            return False
        if job.ca is not None:
            assert self.geometry is not None
            return job.ca.next_chunk(self.geometry) is not None
        assert job.buf is not None
        return job.buf.schedule.runnable(job.buf.received, self._input_ended(job.request))

    def _exhausted(self, job: _Job) -> bool:
        if job.mode == "offline" or not self._input_ended(job.request):
            return False
        if job.ca is not None:
            assert self.geometry is not None
            return job.ca.finished and job.ca.done(self.geometry)
        assert job.buf is not None
        return job.buf.schedule.finished_all(job.buf.received)

    def _featurize(self, outputs: list[RequestOutput]) -> None:
        for job in list(self._jobs.values()):
            req = job.request
            if not self._needs_ingest(job):
                continue
            try:
                audio = torch.from_numpy(np.array(req.take_pending_audio(), dtype=np.float32))
                if audio.ndim != 1:
                    raise ValueError(f"expected mono 1-D audio, got shape {tuple(audio.shape)}")
                if job.ca is not None:
                    job.ca.add_features(job.ca.mel.feed(audio))
                    if req.input_finished:
                        job.ca.add_features(job.ca.mel.finish())
                        job.ca.finished = True
                elif job.buf is not None:
                    job.buf.add_audio(audio)
            except Exception as exc:
                logger.exception("features failed for request %s", req.request_id)
                outputs.append(self._fail(job, "features", exc))

    def _run_offline(self, jobs: list[_Job]) -> list[RequestOutput]:
        try:
            audios = [torch.from_numpy(np.array(j.request.audio, dtype=np.float32)).reshape(-1) for j in jobs]
            lengths = torch.tensor([len(a) for a in audios])
            batch = torch.zeros(len(jobs), int(lengths.max()))
            for i, a in enumerate(audios):
                batch[i, : len(a)] = a
            with torch.inference_mode():
                with stage_timer("offline.collate"):
                    mel, mel_len = self.ckpt.frontend(batch.to(self.device), lengths.to(self.device))
                dtype = next(self.ckpt.model.parameters()).dtype
                contexts = [list(self.look_ahead)] * len(jobs) if self.look_ahead else None
                with stage_timer("offline.encode"):
                    enc, enc_len = self.ckpt.model.encoder(mel.to(dtype), mel_len, contexts)
            with stage_timer("offline.decode"):
                self.decoder.decode([j.decode for j in jobs], enc, enc_len)
        except Exception as exc:
            logger.exception("offline batch of %d failed", len(jobs))
            return [self._fail(j, "encode", exc) for j in jobs]
        return [self._finish(j, "stop") for j in jobs]

    def _run_group(self, batch: list[_Job]) -> list[RequestOutput]:
        try:
            if batch[0].ca is not None:
                assert self.ca_encoder is not None and self.geometry is not None
                streams = [j.ca for j in batch]
                inputs = [s.take_input(self.geometry, s.next_chunk(self.geometry)) for s in streams]  # type: ignore[union-attr, arg-type]
                with torch.inference_mode(), stage_timer("streaming.encode"):
                    enc, lengths = self.ca_encoder.step(streams, inputs)  # type: ignore[arg-type]
            else:
                bufs = [j.buf for j in batch if j.buf is not None]
                steps = [b.take_step(self._input_ended(j.request)) for b, j in zip(bufs, batch, strict=True)]
                with stage_timer("streaming.encode"):
                    windows = self.buffered_encoder.step(bufs, steps)  # type: ignore[arg-type]
                enc, lengths = _pad([w.chunk for w in windows])
            with stage_timer("streaming.decode"):
                self.decoder.decode([j.decode for j in batch], enc, lengths)
                if batch[0].buf is not None:
                    self._decode_tentative(batch, [w.right for w in windows])
        except Exception as exc:
            logger.exception("stream step failed for %d streams", len(batch))
            return [self._fail(j, "encode", exc) for j in batch]
        outputs = []
        for job in batch:
            job.last_advanced = self._step
            if self._exhausted(job):
                outputs.append(self._finish(job, "stop"))
            elif job.request.streaming:  # a long offline request reports once, finished
                outputs.append(self.outputs.partial(job.request, job.decode.hyp, job.decode.ctc, job.tentative,
                                                    job.decode.beam))  # fmt: skip
        return outputs

    def _decode_tentative(self, batch: list[_Job], rights: list[torch.Tensor]) -> None:
        """Each buffered stream's right-context frames, decoded from a copy of its state after the
        committed ones: the tentative tail of its partial (seed 004), never committed."""
        for job in batch:
            job.tentative = None
        if not self.options.tentative_partials or self.method == "ctc":
            return
        rows = [i for i, r in enumerate(rights)
                if r.shape[0] and batch[i].decode.beam is None and batch[i].request.streaming]  # fmt: skip
        if not rows:
            return
        enc, lengths = _pad([rights[i] for i in rows])
        result = self.decoder.peek([batch[i].decode for i in rows], enc, lengths)
        for k, i in enumerate(rows):
            batch[i].tentative = Hypothesis(result.tokens[k], result.frames[k], result.logprobs[k])

    def _final_output(self, job: _Job, reason: FinishReason) -> RequestOutput:
        return self.outputs.final(job.request, job.decode.hyp, job.decode.ctc, reason, job.decode.beam)


def _pad(frames: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(n_i, D) frame runs -> zero-padded (B, max n, D) and their lengths (B,)."""
    lengths = torch.tensor([f.shape[0] for f in frames])
    out = torch.zeros(len(frames), max(int(lengths.max()), 1), frames[0].shape[1], dtype=frames[0].dtype)
    for i, f in enumerate(frames):
        out[i, : f.shape[0]] = f
    return out, lengths
