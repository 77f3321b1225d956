"""The Zipformer runner: offline utterances and chunked streams, each kind advanced in one batched
forward per engine step, decoded greedily.

Per `execute()`:
1. ingest: audio queued since the last step becomes fbank windows per stream; every stream's
   new frames are computed in one call;
2. offline: up to `max_batch_size` whole utterances through the full-context encoder at once;
3. streams: every stream with a whole chunk of features (or whose input ended), least recently
   advanced first, up to `max_batch_size`, steps one chunk together: cache rows gathered, one
   encoder forward, rows scattered back, one batched greedy decode (and one batched modified beam
   search for the requests with a beam); then a partial, or the final output when its padded end
   has been read.
The job table, the pick and release are the chunked-stream skeleton's (engine/streaming/chunked.py).

A request with beam_size > 1 (or keywords) is decoded by icefall's modified beam search
(engine/ops/modified_beam.py through beam.py's ZipformerNet), its hypothesis set carried across
chunks; keywords bias it with icefall's ContextGraph.

Decoding interface (for a beam search over this family, e.g. the shared transducer search):
- `self.model.decoder` is the stateless predictor: `predict(context)` with context (N,
  context_size) int64 of each hypothesis's last tokens (-1 pads a short history;
  `start_context()` is the empty hypothesis) -> (N, decoder_dim);
- `self.model.joiner`: `project_encoder(enc)` (B, T, encoder_dim) -> (B, T, joiner_dim) once per
  frame, `project_decoder(dec)` once per prediction, `join(enc_proj, dec_proj)` -> logits
  (..., vocab); blank is `config.blank_id`;
- encoder frames come from `_encode_offline` (whole utterances) and `_encode_streams` (one chunk
  per stream); `greedy_decode` (transducer.py) consumes them here, one symbol per frame as icefall.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from engine.config import EngineConfig
from engine.device import resolve_device, resolve_dtype
from engine.errors import InvalidRequestError, UnsupportedError
from engine.metrics import stage_timer
from engine.models.zipformer.beam import ZipformerNet, new_beam
from engine.models.zipformer.checkpoint import ZipformerCheckpoint, load_checkpoint
from engine.models.zipformer.config import EMBED_CONTEXT
from engine.models.zipformer.frontend import LOG_EPS, SHIFT, FbankStream, Featurizer
from engine.models.zipformer.geometry import StreamGeometry, select_geometry
from engine.models.zipformer.info import DECODE_METHODS, FRAME_SECONDS, SAMPLE_RATE, model_info
from engine.models.zipformer.options import ZipformerOptions
from engine.models.zipformer.outputs import OutputBuilder
from engine.models.zipformer.streaming import CacheSlots
from engine.models.zipformer.transducer import GreedyState, greedy_decode
from engine.ops.modified_beam import ModifiedBeam, modified_beam_search
from engine.request import Request, error_output
from engine.runner import ModelInfo, RunnerStats
from engine.streaming.chunked import ChunkedStreamRunner
from engine.types import DecodingOptions, FinishReason, RequestOutput

logger = logging.getLogger(__name__)

Mode = Literal["offline", "stream"]


OFFLINE_FEED_SAMPLES = 30 * 16000
"""A long offline request's audio goes to the fbank 30 s at a time, when its stream has less
than a chunk's window of features left: its memory is that of 30 s, however long the file."""

@dataclass(eq=False)
class _Stream:
    """A live stream's unconsumed features; its encoder state is a row of CacheSlots."""

    fbank: FbankStream
    slot: int
    feats: torch.Tensor
    """(n, 80) feature frames from absolute frame `pos` on (consumed frames are dropped)."""
    pos: int = 0
    """First feature frame of the next chunk."""
    total: int | None = None
    """Feature frames of the whole utterance, once its input has ended."""
    fed: int = 0
    """A long offline request: samples of its audio handed to the fbank so far."""


@dataclass(eq=False)
class _Job:
    request: Request
    mode: Mode
    hyp: GreedyState
    beam: ModifiedBeam | None = None
    """The request's hypothesis set when it beam-searches (then `hyp` stays empty)."""
    stream: _Stream | None = None
    last_advanced: int = -1


class ZipformerRunner(ChunkedStreamRunner[_Job]):
    def __init__(self, ckpt: ZipformerCheckpoint, config: EngineConfig, options: ZipformerOptions,
                 device: torch.device) -> None:  # fmt: skip
        super().__init__(config)
        self.ckpt, self.options, self.device = ckpt, options, device
        self.model = ckpt.model
        if config.decode_method not in (None, *DECODE_METHODS):
            raise InvalidRequestError(f"decode_method {config.decode_method!r} is not offered by this zipformer model "
                                      f"(it offers: {', '.join(DECODE_METHODS)})")  # fmt: skip
        self.sample_rate = SAMPLE_RATE
        self.frame_seconds = FRAME_SECONDS
        self.geometry: StreamGeometry | None = select_geometry(ckpt.config, config.chunk_size, config.num_left_chunks)
        self.supports_streaming = self.geometry is not None
        self.stream_chunk_samples = (self.geometry.hop if self.geometry else 32) * SHIFT
        """Audio one streaming step consumes: 2c feature frames (320 ms at c = 16)."""
        dtype = next(self.model.parameters()).dtype
        self.slots = CacheSlots(ckpt.config, self.geometry or StreamGeometry(0, 0), options.max_streams, dtype, device)
        self.featurizer = Featurizer(device)
        self.outputs = OutputBuilder(ckpt.tokenizer, self.frame_seconds)
        self.net = ZipformerNet(self.model.decoder, self.model.joiner)

    @classmethod
    def from_config(cls, config: EngineConfig, options: ZipformerOptions | None = None) -> ZipformerRunner:
        device = resolve_device(config)
        ckpt = load_checkpoint(config.resolved_ckpt_dir(), config.checkpoint_name, device, resolve_dtype(config, device))
        return cls(ckpt, config, options or ZipformerOptions(), device)

    # ---- ModelRunner protocol ----

    def info(self) -> ModelInfo:
        info = model_info(self.ckpt.config, self.ckpt.name, self.ckpt.tokenizer.sp is not None, self.geometry,
                          self.options, sum(p.numel() for p in self.model.parameters()))
        if self.geometry is not None:  # the state's dtype is the load's
            info.details["state_bytes_per_stream"] = self.slots.bytes_per_stream()
        return info

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        """Nothing family-specific to check: the chunk is engine-wide (chosen at load) and the
        options this model lacks are refused at admission from `info().capabilities`."""

    def check_duration(self, seconds: float, options: DecodingOptions) -> None:
        """A non-streaming model attends over the whole utterance: past full_context_seconds it is
        refused when added (a 400 that says why), not failed at admission (a 500)."""
        if self.geometry is None and seconds > self.options.full_context_seconds:
            raise UnsupportedError(self._too_long(seconds))

    def _too_long(self, seconds: float) -> str:
        return (f"{seconds:.1f} s of audio is longer than full_context_seconds={self.options.full_context_seconds:g}: "
                "this non-streaming Zipformer attends over the whole utterance (memory grows with its square); "
                "split the audio or raise zipformer_full_context_seconds")

    def free_slots(self) -> int:
        return self.slots.num_free - sum(1 for j in self._jobs.values() if j.mode == "offline")

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        failed = []
        for req in requests:
            hyp = GreedyState(context=self.model.decoder.start_context())
            words = req.decoding.keywords  # admission allows them only with bpe.model (info.py)
            keywords = [k for k in (self.ckpt.tokenizer.encode(w) for w in words) if k] if words else []
            beam = None
            if req.decoding.beam_size > 1 or keywords:
                beam = new_beam(self.net, req.decoding.beam_size, keywords, self.options.keyword_boost)
            job = _Job(req, "offline", hyp, beam)
            long_offline = not req.streaming and req.duration > self.options.full_context_seconds
            if long_offline and self.geometry is None:
                failed.append(error_output(req, "admission", self._too_long(req.duration)))
                continue
            if (req.streaming or long_offline) and self.geometry is not None:
                slot = self.slots.allocate()
                if slot is None:
                    failed.append(error_output(req, "admission", "no free stream slot"))
                    continue
                job.mode = "stream"
                job.stream = _Stream(FbankStream(), slot, torch.zeros(0, 80))
            self._register(job)
        return failed

    def has_work(self) -> bool:
        return any(j.mode == "offline" or self._needs_ingest(j) or self._ready(j) for j in self._jobs.values())

    def _free(self, job: _Job) -> None:
        if job.stream is not None:
            self.slots.free(job.stream.slot)

    def _cache_stats(self) -> RunnerStats:
        return RunnerStats(decode_slots_used=self.slots.num_slots - self.slots.num_free,
                           decode_slots_capacity=self.slots.num_slots)  # fmt: skip

    # ---- one engine step ----

    def _before_streams(self) -> list[RequestOutput]:
        offline = [j for j in self._jobs.values() if j.mode == "offline"][: self.config.max_batch_size]
        return self._run_offline(offline) if offline else []

    def _needs_ingest(self, job: _Job) -> bool:
        s, req = job.stream, job.request
        if s is None:
            return False
        if not req.streaming:  # a long offline request: its audio is fed as the chunks consume it
            return not s.fbank.finished and s.feats.shape[0] < self.geometry.window  # type: ignore[union-attr]
        return bool(req.pending_samples) or (req.input_finished and not s.fbank.finished)

    def _ready(self, job: _Job) -> bool:
        s = job.stream
        if s is None or self.geometry is None:
            return False
        if s.total is not None:
            return s.pos < s.total + self.geometry.end_padding
        return s.feats.shape[0] >= self.geometry.window

    def _featurize(self, outputs: list[RequestOutput]) -> None:
        jobs = [j for j in self._jobs.values() if self._needs_ingest(j)]
        windows = []
        for job in jobs:
            stream = job.stream
            assert stream is not None
            req, fb = job.request, stream.fbank
            if req.streaming:
                w = fb.feed(req.take_pending_audio())
                ended = req.input_finished
            else:  # a piece at a time: an hour's fbank at once would hold gigabytes of intermediates
                audio = np.asarray(req.audio, dtype=np.float32).reshape(-1)
                w = fb.feed(audio[stream.fed : stream.fed + OFFLINE_FEED_SAMPLES])
                stream.fed = min(stream.fed + OFFLINE_FEED_SAMPLES, audio.shape[0])
                ended = stream.fed >= audio.shape[0]
            if ended:
                w = np.concatenate([w, fb.finish()])
            windows.append(w)
        for job, f in self._features(jobs, windows, self.featurizer.compute, outputs):
            s = job.stream
            assert s is not None
            s.feats = torch.cat([s.feats, f])
            if s.fbank.finished:
                s.total = s.fbank.emitted

    def _run_offline(self, jobs: list[_Job]) -> list[RequestOutput]:
        # No tail padding, causal model or not: icefall's pretrained.py (its script for running a
        # checkpoint) encodes the features as they are. decode.py pads a causal model's features
        # with 30 frames of log(1e-10), noting it "seems to cause insertions at the end of the
        # utterance"; at full context there is no look-ahead left to flush (the streaming path
        # keeps icefall's tail padding, where there is).
        try:
            with torch.inference_mode():
                with stage_timer("offline.collate"):
                    feats = self.featurizer.compute([_windows_of(j.request) for j in jobs])
                    lengths = torch.tensor([f.shape[0] for f in feats])
                    batch = torch.full((len(jobs), max(int(lengths.max()), 1), 80), LOG_EPS)
                    for i, f in enumerate(feats):
                        batch[i, : f.shape[0]] = f
                keep = [i for i, n in enumerate(lengths.tolist()) if (n - EMBED_CONTEXT) // 2 >= 1]
                if keep:  # shorter than one 50 Hz frame: nothing to encode, an empty transcript
                    dtype = next(self.model.parameters()).dtype
                    with stage_timer("offline.encode"):
                        enc, enc_len = self.model.encoder(batch[keep].to(self.device, dtype), lengths[keep].to(self.device))
                        enc_proj = self.model.joiner.project_encoder(enc)
                    with stage_timer("offline.decode"):
                        self._decode([jobs[i] for i in keep], enc_proj, enc_len.tolist())
        except Exception as exc:
            logger.exception("offline batch of %d failed", len(jobs))
            return [self._fail(j, "encode", exc) for j in jobs]
        return [self._finish(j, "stop") for j in jobs]

    def _run_streams(self, batch: list[_Job]) -> list[RequestOutput]:
        geo = self.geometry
        assert geo is not None
        try:
            with torch.inference_mode():
                windows = [self._take_window(j.stream) for j in batch]  # type: ignore[arg-type]
                dtype = next(self.model.parameters()).dtype
                feats = torch.stack(windows).to(self.device, dtype)
                slots = torch.tensor([j.stream.slot for j in batch], device=self.device)  # type: ignore[union-attr]
                with stage_timer("streaming.encode"):
                    embed, processed, caches = self.slots.gather(slots)
                    enc, embed, caches = self.model.encoder.step(feats, embed, processed, geo.left, caches)
                    self.slots.scatter(slots, embed, processed + geo.chunk, caches)
                    enc_proj = self.model.joiner.project_encoder(enc)
                with stage_timer("streaming.decode"):
                    self._decode(batch, enc_proj, [enc.shape[1]] * len(batch))
        except Exception as exc:
            logger.exception("stream step failed for %d streams", len(batch))
            return [self._fail(j, "encode", exc) for j in batch]
        outputs = []
        for job in batch:
            job.last_advanced = self._step
            s = job.stream
            assert s is not None
            if s.total is not None and s.pos >= s.total + geo.end_padding:
                outputs.append(self._finish(job, "stop"))
            elif job.request.streaming:  # a long offline request reports once, finished
                outputs.append(self.outputs.partial(job.request, job.hyp, job.beam))
        return outputs

    def _decode(self, jobs: list[_Job], enc_proj: torch.Tensor, lengths: list[int]) -> None:
        """Greedy rows in one batched decode, beam rows in one batched modified beam search."""
        greedy = [i for i, j in enumerate(jobs) if j.beam is None]
        beams = [i for i, j in enumerate(jobs) if j.beam is not None]
        for rows, run in ((greedy, self._greedy), (beams, self._beam)):
            if rows:
                index = torch.tensor(rows, device=enc_proj.device)
                run([jobs[i] for i in rows], enc_proj.index_select(0, index), [lengths[i] for i in rows])

    def _greedy(self, jobs: list[_Job], enc_proj: torch.Tensor, lengths: list[int]) -> None:
        greedy_decode(self.model.decoder, self.model.joiner, [j.hyp for j in jobs], enc_proj, lengths)

    def _beam(self, jobs: list[_Job], enc_proj: torch.Tensor, lengths: list[int]) -> None:
        modified_beam_search(self.net, enc_proj, lengths, [j.beam for j in jobs])  # type: ignore[misc]

    def _take_window(self, s: _Stream) -> torch.Tensor:
        """The next chunk's 2c + 13 feature frames (log(1e-10) past the end), then advance 2c."""
        geo = self.geometry
        assert geo is not None
        w = s.feats[: geo.window]
        if w.shape[0] < geo.window:
            w = torch.cat([w, torch.full((geo.window - w.shape[0], w.shape[1]), LOG_EPS)])
        s.feats = s.feats[geo.hop :]
        s.pos += geo.hop
        return w

    def _final_output(self, job: _Job, reason: FinishReason) -> RequestOutput:
        return self.outputs.final(job.request, job.hyp, reason, job.beam)


def _windows_of(req: Request) -> np.ndarray:
    """Fbank windows of a whole offline utterance (mirrored at both ends)."""
    audio = np.asarray(req.audio if req.audio is not None else np.zeros(0), dtype=np.float32).reshape(-1)
    stream = FbankStream()
    return np.concatenate([stream.feed(audio), stream.finish()])
