"""The WeNet model runner: every ready stream advances by one chunk in one batched forward.

Per engine step (`execute`):
1. featurize: all audio queued since the last step, of every stream, in one batched fbank call;
2. schedule: streams holding a full chunk window of features (or a final partial window at end
   of input), least recently advanced first, up to `max_batch_size`; reserve their KV blocks
   (recycling the oldest or finishing with 'length' at the ceiling);
3. forward: one batched paged-attention chunk forward; K/V land in the streams' blocks;
4. decode: CTC greedy per stream, prefix beam search of every beam-searching stream in one
   operator call (engine.ops), partial or final outputs.
Offline requests take the same path with all their audio queued at once. The stream table, the
pick and release are the chunked-stream skeleton's (engine/streaming/chunked.py).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from engine.cache import BlockPool, BlockTable, KVSpec, plan_pool, pool_details
from engine.config import EngineConfig
from engine.ctc_prefix import CTCState, advance_batch
from engine.device import resolve_device, resolve_dtype
from engine.errors import InvalidRequestError
from engine.fbank import join_tail
from engine.languages import vocabulary_language
from engine.metrics import stage_timer
from engine.models.wenet.checkpoint import WenetCheckpoint, load_checkpoint
from engine.models.wenet.config import RIGHT_CONTEXT, SUBSAMPLING, encoder_frame_seconds
from engine.models.wenet.ctc import Detokenizer
from engine.models.wenet.info import (
    ATTENTION_RESCORING,
    decode_method,
    decode_methods,
    model_info,
)
from engine.models.wenet.keywords import KeywordSpeller
from engine.models.wenet.model import (
    PagedBatch,
    sinusoid,
    subsampled_length,
    window_frames,
)
from engine.models.wenet.options import WenetOptions
from engine.models.wenet.outputs import OutputBuilder
from engine.models.wenet.stream import WenetStream
from engine.ops.fbank import KaldiFbank
from engine.request import Request, error_output
from engine.runner import ModelInfo, RunnerStats
from engine.streaming.chunked import ChunkedStreamRunner
from engine.types import DecodingOptions, FinishReason, RequestOutput

logger = logging.getLogger(__name__)

AUDIO_SCALE = 32768.0
"""WeNet computes fbank on int16-range samples; float waveforms in [-1, 1] are scaled up."""
KEYWORD_BEAM = 4
"""Beam of a greedy (beam_size 1) request that names keywords: biasing needs alternatives to promote."""
OFFLINE_PIECE_SAMPLES = 30 * 16000
"""Most offline audio featurized per step (30 s at 16 kHz); a step consumes one chunk anyway."""
MAX_BLOCKS_PER_SEQ = 512
"""Blocks one stream with unlimited history may count on when the pool is derived (§6.1's
max_blocks_per_seq): 512 chunks of 16 frames is 5.5 min of history at 40 ms a frame."""
MIN_WINDOW = RIGHT_CONTEXT + 1
"""Feature frames that yield one encoder frame (the smallest flushable window)."""


class WenetRunner(ChunkedStreamRunner[WenetStream]):
    supports_streaming = True

    def __init__(
        self, ckpt: WenetCheckpoint, config: EngineConfig, device: torch.device, options: WenetOptions | None = None
    ) -> None:
        super().__init__(config)
        self.ckpt = ckpt
        self.device = device
        self.options = options or WenetOptions()
        self.model = ckpt.model
        cfg = ckpt.config
        self.sample_rate = ckpt.fbank.sample_rate
        self.chunk_size = config.chunk_size
        self.num_left_chunks = config.num_left_chunks
        self.window = window_frames(self.chunk_size)
        self.frame_seconds = encoder_frame_seconds(ckpt.fbank.frame_shift_ms)
        self.stream_chunk_samples = self.chunk_size * SUBSAMPLING * ckpt.fbank.window_shift
        """One chunk's stride of audio: what the streaming forward advances a stream by per step."""
        self.fbank = KaldiFbank(ckpt.fbank, device)
        self.detok = Detokenizer(ckpt.units)
        dtype = next(self.model.parameters()).dtype
        spec = KVSpec(cfg.num_blocks, cfg.attention_heads, cfg.head_dim, dtype)
        block_size = config.block_size_frames or self.chunk_size
        self.blocks_per_chunk = math.ceil(self.chunk_size / block_size) + (
            1 if self.chunk_size % block_size else 0
        )
        if self.num_left_chunks >= 0:  # the sliding window plus the chunk being written
            min_blocks = math.ceil(self.chunk_size * (self.num_left_chunks + 1) / block_size) + 1
        else:
            min_blocks = self.blocks_per_chunk
        max_stream_blocks = self.options.max_stream_blocks
        if max_stream_blocks is not None and max_stream_blocks < self.blocks_per_chunk:
            raise InvalidRequestError(
                f"max_stream_blocks={max_stream_blocks} cannot hold one chunk "
                f"({self.blocks_per_chunk} blocks of {block_size} frames); raise it or block_size_frames"
            )
        # what one stream can ever hold: its sliding window, else its ceiling (max_stream_blocks, or
        # §6.1's block-table width: history past it is recycled or ends the stream)
        blocks_per_seq = min_blocks if self.num_left_chunks >= 0 else (max_stream_blocks or MAX_BLOCKS_PER_SEQ)
        self.pool_plan = plan_pool(
            spec, block_size, min_blocks=min_blocks, blocks_per_seq=blocks_per_seq, sequences=config.max_batch_size,
            max_num_blocks=config.max_num_blocks, device=device, gpu_memory_utilization=config.gpu_memory_utilization,
            cpu_cache_bytes=config.cpu_cache_bytes,
        )  # fmt: skip
        num_blocks = self.pool_plan.num_blocks
        self.pool = BlockPool(spec, num_blocks, block_size, device)
        self.stream_ceiling = max_stream_blocks or num_blocks
        self.kv_exhausted_total = 0
        """Streams that hit the KV ceiling (finished 'length' or had history recycled)."""
        self.kv_recycled_blocks_total = 0
        self.decode_methods = decode_methods(ckpt.has_decoder)
        self.decode_method = decode_method(config, ckpt.has_decoder)
        self.rescoring = self.decode_method == ATTENTION_RESCORING
        self.speller = KeywordSpeller(ckpt.units)
        self.outputs = OutputBuilder(ckpt, self.detok, self.frame_seconds, self.options.ctc_weight)

    @classmethod
    def from_config(cls, config: EngineConfig, options: WenetOptions | None = None) -> WenetRunner:
        device = resolve_device(config)
        ckpt = load_checkpoint(config.resolved_ckpt_dir(), device, resolve_dtype(config, device),
                               config.checkpoint_name)
        return cls(ckpt, config, device, options)

    # ---- ModelRunner protocol ----

    def info(self) -> ModelInfo:
        info = model_info(self.ckpt.config, self.sample_rate, self.frame_seconds, self.ckpt.weights_path,
                          self.ckpt.has_decoder, self.config, sum(p.numel() for p in self.model.parameters()),
                          language=self.options.language or vocabulary_language(self.ckpt.units))
        info.details.update(pool_details(self.pool_plan))  # planned from memory at load
        return info

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        for keyword in options.keywords:  # a keyword the vocabulary cannot spell is refused by name
            self.speller.spell(keyword)

    def free_slots(self) -> int:
        return self.pool.num_free // self.blocks_per_chunk

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        failed = []
        cfg = self.ckpt.config
        for req in requests:
            opts = req.decoding
            beam = KEYWORD_BEAM if opts.keywords and opts.beam_size == 1 else opts.beam_size
            try:
                trie = self.speller.trie(opts.keywords, self.options.keyword_boost)
            except InvalidRequestError as exc:
                failed.append(error_output(req, "admission", str(exc)))
                continue
            table = BlockTable(self.pool.block_size)
            if not self._grow(table, self.chunk_size):
                table.release(self.pool)
                failed.append(error_output(req, "admission", "no free KV blocks to admit the stream"))
                continue
            stream = WenetStream(
                request=req,
                table=table,
                cnn_cache=torch.zeros(
                    cfg.num_blocks,
                    cfg.output_size,
                    cfg.conv_lorder,
                    device=self.device,
                    dtype=self.pool.spec.dtype,
                ),
                ctc=CTCState(beam_size=beam, trie=trie),
                wave_tail=torch.zeros(0),
                feats=torch.zeros(0, cfg.input_dim, device=self.device),
                offline_audio=None
                if req.streaming
                else (req.audio if req.audio is not None else np.zeros(0)),
                encoder_out=[] if self.rescoring and beam > 1 else None,
            )
            self._register(stream)
        return failed

    def has_work(self) -> bool:
        return any(
            s.has_pending_audio() or s.input_done or len(s.feats) >= self.window
            for s in self._jobs.values()
        )

    def _free(self, stream: WenetStream) -> None:
        stream.table.release(self.pool)

    def _cache_stats(self) -> RunnerStats:
        return RunnerStats(
            kv_blocks_used=self.pool.num_blocks - self.pool.num_free,
            kv_blocks_capacity=self.pool.num_blocks,
            kv_exhausted_total=self.kv_exhausted_total,
            kv_recycled_blocks_total=self.kv_recycled_blocks_total,
        )

    # ---- one engine step ----

    def _before_streams(self) -> list[RequestOutput]:
        """Streams whose input ended with less than one encoder frame of features left finish."""
        done = [s for s in self._jobs.values() if s.input_done and len(s.feats) < MIN_WINDOW]
        return [self._finish(s, "stop") for s in done]

    def _ready(self, stream: WenetStream) -> bool:
        return len(stream.feats) >= self.window or (stream.input_done and len(stream.feats) >= MIN_WINDOW)

    def _run_streams(self, ready: list[WenetStream]) -> list[RequestOutput]:
        """Reserve each picked stream's KV blocks for its chunk (a stream at its ceiling finishes
        with 'length'), then one batched forward of the others."""
        outputs, batch = [], []
        for stream in ready:
            n = len(stream.feats)
            c = self.chunk_size if n >= self.window else subsampled_length(n)  # else a final partial window
            if self._reserve(stream, c):
                batch.append((stream, c))
            else:
                outputs.append(self._finish(stream, "length"))
        self.streams_stepped = sum(1 for stream, _ in batch if stream.request.streaming)
        if batch:
            outputs.extend(self._forward(batch))
        return outputs

    def _featurize(self, outputs: list[RequestOutput]) -> None:
        todo: list[WenetStream] = []
        waves: list[torch.Tensor] = []
        for stream in list(self._jobs.values()):
            if not stream.has_pending_audio():
                continue
            if stream.offline_audio is not None:
                # Feature a long file piecewise: memory stays bounded, and the result is the same
                # since audio framing does not depend on how it is split.
                audio = stream.offline_audio[:OFFLINE_PIECE_SAMPLES]
                rest = stream.offline_audio[OFFLINE_PIECE_SAMPLES:]
                stream.offline_audio = rest if len(rest) else None
            else:
                audio = stream.request.take_pending_audio()
            new = self._samples(stream, audio, outputs)
            if new is None:
                continue
            wave, stream.wave_tail = join_tail(stream.wave_tail, new * AUDIO_SCALE, self.fbank.opts)
            todo.append(stream)
            waves.append(wave)
        for stream, f in self._features(todo, waves, self.fbank, outputs):
            if len(f):
                f = self.model.encoder.normalize(f)
                stream.feats = torch.cat([stream.feats, f]) if len(stream.feats) else f

    def _grow(self, table: BlockTable, frames: int) -> bool:
        """Allocate the blocks `frames` more frames need, recycling own history if allowed."""
        need = table.blocks_needed(frames)
        recycle = self.options.recycle_streaming_history
        while need:
            if len(table.blocks) >= self.stream_ceiling or self.pool.num_free == 0:
                if not recycle or table.droppable_blocks() == 0:
                    return False
                table.drop_before(table.base + self.pool.block_size, self.pool)
                self.kv_recycled_blocks_total += 1
                continue
            block = self.pool.allocate()
            assert block is not None  # num_free > 0 was checked just above
            table.blocks.append(block)
            need -= 1
        return True

    def _reserve(self, stream: WenetStream, frames: int) -> bool:
        table = stream.table
        if self.num_left_chunks >= 0:  # frames left of the attention window are never read again
            table.drop_before(table.end - self.num_left_chunks * self.chunk_size, self.pool)
        recycled = self.kv_recycled_blocks_total
        ok = self._grow(table, frames)
        if not ok or self.kv_recycled_blocks_total != recycled:
            if not stream.hit_ceiling:  # counted once per stream
                self.kv_exhausted_total += 1
            stream.hit_ceiling = True
            if not ok:
                logger.info(
                    "request %s hit the KV ceiling at %d frames (%d blocks); finishing with 'length'",
                    stream.request.request_id, table.end, len(table.blocks),
                )  # fmt: skip
        return ok

    def _forward(self, batch: list[tuple[WenetStream, int]]) -> list[RequestOutput]:
        dev = self.device
        dtype = self.pool.spec.dtype
        b, c_max = len(batch), max(c for _, c in batch)
        ctx_lens = [s.table.end - s.table.start for s, _ in batch]
        t_ctx = max(ctx_lens)
        block_table = torch.zeros(b, max(len(s.table.blocks) for s, _ in batch), dtype=torch.long)
        positions = torch.zeros(b, t_ctx + c_max, dtype=torch.long)
        key_mask = torch.zeros(b, 1, t_ctx + c_max, dtype=torch.bool)
        chunk_lens = torch.tensor([c for _, c in batch])
        write_slots, write_rows = [], []
        feats = torch.zeros(b, window_frames(c_max), self.ckpt.config.input_dim, device=dev)
        for i, ((stream, c), n_ctx) in enumerate(zip(batch, ctx_lens, strict=True)):
            table = stream.table
            block_table[i, : len(table.blocks)] = torch.tensor(table.blocks, dtype=torch.long)
            if n_ctx:
                positions[i, :n_ctx] = torch.arange(table.start, table.end)
                key_mask[i, 0, :n_ctx] = True
            positions[i, t_ctx : t_ctx + c] = torch.arange(table.end, table.end + c)
            key_mask[i, 0, t_ctx : t_ctx + c] = True
            write_slots.append(table.slots(table.end, table.end + c))
            write_rows.append(torch.arange(c) + i * c_max)
            w = window_frames(c)
            feats[i, :w] = stream.feats[:w]
        paged = PagedBatch(
            block_table=block_table.to(dev),
            context_start=torch.tensor([s.table.start - s.table.base for s, _ in batch], device=dev),
            context_lens=torch.tensor(ctx_lens, device=dev),
            block_size=self.pool.block_size,
            key_mask=key_mask.to(dev),
            pos_emb=sinusoid(positions.to(dev), self.ckpt.config.output_size).to(dtype),
            chunk_valid=(torch.arange(c_max).unsqueeze(0) < chunk_lens.unsqueeze(1)).to(dev),
            chunk_lens=chunk_lens.to(dev),
            write_rows=torch.cat(write_rows).to(dev),
            write_slots=torch.cat(write_slots).to(dev),
        )
        cnn = torch.stack([s.cnn_cache for s, _ in batch], dim=1)  # (L, B, D, lorder)
        try:
            with stage_timer("streaming.encode"):
                log_probs, new_cnn, enc = self.model.forward_chunk_paged(
                    feats.to(dtype), paged, self.pool.k, self.pool.v, cnn
                )
                log_probs = log_probs.cpu()
        except Exception as exc:
            logger.exception("encoder forward failed for %d streams", b)
            return [self._fail(s, "encode", exc) for s, _ in batch]
        with stage_timer("streaming.decode"):
            return self._advance(batch, log_probs, new_cnn, enc)

    def _advance(self, batch: list[tuple[WenetStream, int]], log_probs: torch.Tensor, new_cnn: torch.Tensor,
                 enc: torch.Tensor) -> list[RequestOutput]:
        """Commit the chunk each stream just encoded and run their CTC searches over it."""
        for i, (stream, c) in enumerate(batch):
            stream.table.end += c
            stream.feats = stream.feats[SUBSAMPLING * c :]
            stream.cnn_cache = new_cnn[:, i]
            if stream.encoder_out is not None:
                stream.encoder_out.append(enc[i, :c])
            stream.last_advanced = self._step
        failed = self._advance_ctc([s for s, _ in batch], log_probs, [c for _, c in batch])
        outputs = []
        for stream, _c in batch:
            if stream in failed:
                outputs.append(self._fail(stream, "decode", failed[stream]))
            elif stream.input_done and len(stream.feats) < MIN_WINDOW:
                outputs.append(self._finish(stream, "stop"))
            else:
                outputs.append(self._partial(stream))
        return outputs

    def _advance_ctc(
        self, streams: list[WenetStream], log_probs: torch.Tensor, lengths: list[int]
    ) -> dict[WenetStream, Exception]:
        """CTC-decode every stream's chunk: log_probs (B, C, V), row i valid for lengths[i]
        frames; all beam searches of a step in one operator call. If that fails, each stream is
        retried alone so that one bad stream fails only itself. Returns the failed streams."""
        try:
            advance_batch([s.ctc for s in streams], log_probs, lengths)
            return {}
        except Exception:
            logger.exception("batched CTC decoding failed for %d streams; retrying one by one", len(streams))
        failed: dict[WenetStream, Exception] = {}
        for i, stream in enumerate(streams):
            try:
                advance_batch([stream.ctc], log_probs[i : i + 1], lengths[i : i + 1])
            except Exception as exc:
                logger.exception("CTC decoding failed for request %s", stream.request.request_id)
                failed[stream] = exc
        return failed

    # ---- outputs ----

    def _partial(self, stream: WenetStream) -> RequestOutput:
        return self.outputs.partial(stream.request, stream.ctc)

    def _final_output(self, stream: WenetStream, reason: FinishReason) -> RequestOutput:
        """The finished search, its n-best attention-rescored when the model has a decoder."""
        with stage_timer("streaming.finalize"):
            stream.ctc.finalize()
            self.outputs.rescore(stream.ctc, stream.encoder_out)
            return self.outputs.final(stream.request, stream.ctc, reason)
