"""The paraformer-online runner: every stream with a chunk ready advances in one batched step.

Per engine step (`execute`):
1. featurize: the audio queued since the last step, of every stream, in one batched fbank call;
   LFR frames are computed as their right context arrives (FunASR's WavFrontendOnline emits the
   same frames);
2. schedule: streams whose next chunk is whole (`chunk` x 60 ms of audio received past the
   chunks already run), or whose input ended (the final chunk), least recently advanced first,
   up to `max_batch_size`;
3. run: encoder, CIF and decoder over the chunks of all of them at once (online.py);
4. output: a partial with the text so far, or the final output.

Chunk boundaries fall every `chunk x lfr_n x frame_shift` samples of a stream (9,600 at 16 kHz
for FunASR's 600 ms), however the audio arrives, so a stream's tokens are those FunASR's
`generate` returns when fed the same audio in chunks of that size. Offline requests take the
same path with all their audio queued at once (FunASR runs paraformer-online that way too).
The stream table, the pick and release are the chunked-stream skeleton's (engine/streaming/chunked.py).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from engine.config import EngineConfig
from engine.fbank import join_tail
from engine.metrics import stage_timer
from engine.models.paraformer.checkpoint import ParaformerCheckpoint
from engine.models.paraformer.frontend import WavFrontend
from engine.models.paraformer.info import online_info
from engine.models.paraformer.online import ChunkGeometry, ChunkInput, ChunkResult, new_state, run_chunks
from engine.models.paraformer.options import ParaformerOptions
from engine.models.paraformer.spelling import Spelling
from engine.models.paraformer.stream import OnlineStream
from engine.request import Request
from engine.runner import ModelInfo
from engine.streaming.chunked import ChunkedStreamRunner
from engine.streaming.outputs import final_output, logprob_fields, partial_output
from engine.types import DecodingOptions, FinishReason, RequestOutput

logger = logging.getLogger(__name__)



class ParaformerOnlineRunner(ChunkedStreamRunner[OnlineStream]):
    supports_streaming = True

    def __init__(self, ckpt: ParaformerCheckpoint, config: EngineConfig, device: torch.device,
                 options: ParaformerOptions | None = None) -> None:  # fmt: skip
        super().__init__(config)
        self.ckpt = ckpt
        self.device = device
        self.options = options or ParaformerOptions()
        left, chunk, ahead = self.options.chunk_size
        self.geometry = ChunkGeometry(left, chunk, ahead, self.options.encoder_chunk_look_back,
                                      self.options.decoder_chunk_look_back)  # fmt: skip
        self.frontend = WavFrontend(ckpt.config.frontend, ckpt.cmvn, device)
        self.sample_rate = ckpt.config.frontend.sample_rate
        self.frame_samples = round(self.sample_rate * self.frontend.frame_seconds)
        """Samples of one LFR frame (960 at 16 kHz: FunASR's hard-coded chunk unit)."""
        self.stream_chunk_samples = chunk * self.frame_samples
        """One chunk's audio: a stream advances by this much per step."""
        self.spelling = Spelling.of(ckpt)

    # ---- ModelRunner protocol ----

    def info(self) -> ModelInfo:
        return online_info(self.ckpt.config, self.ckpt.weights_path, self.spelling.kind, self.options,
                           sum(p.numel() for p in self.ckpt.model.parameters()))

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        """Everything it cannot serve is left out of `info.ONLINE_CAPABILITIES` and refused at admission."""

    def free_slots(self) -> int:
        return max(self.options.max_streams - len(self._jobs), 0)

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        dim = self.frontend.dim
        for req in requests:
            stream = OnlineStream(
                request=req,
                state=new_state(self.ckpt.model, self.geometry),
                wave_tail=torch.zeros(0),
                fbank=torch.zeros(0, self.ckpt.config.frontend.n_mels, device=self.device),
                feats=torch.zeros(0, dim, device=self.device),
                offline_audio=None if req.streaming else (req.audio if req.audio is not None else np.zeros(0)),
            )  # fmt: skip
            self._register(stream)
        return []

    def has_work(self) -> bool:
        return any(s.has_pending_audio() or self._ready(s) for s in self._jobs.values())

    # ---- one engine step ----

    def _run_streams(self, batch: list[OnlineStream]) -> list[RequestOutput]:
        finals = [self._next_chunk(s) is True for s in batch]
        inputs = [self._chunk(s, final) for s, final in zip(batch, finals, strict=True)]
        try:
            with stage_timer("streaming.encode"):
                results = run_chunks(self.ckpt.model, self.geometry, inputs)
        except Exception as exc:
            logger.exception("paraformer-online chunk of %d streams failed", len(batch))
            return [self._fail(s, "encode", exc) for s in batch]
        with stage_timer("streaming.decode"):
            return [self._advance(s, final, r) for s, final, r in zip(batch, finals, results, strict=True)]

    def _ready(self, stream: OnlineStream) -> bool:
        return self._next_chunk(stream) is not None

    def _next_chunk(self, stream: OnlineStream) -> bool | None:
        """None: nothing to run; False: a whole chunk; True: the final chunk."""
        due = stream.samples >= (stream.chunks + 1) * self.stream_chunk_samples
        # a chunk's LFR frames are all computable once its audio has arrived (the last one's right
        # context ends 80 samples before the chunk does); the check only guards other geometries
        if due and len(stream.feats) >= self.geometry.chunk:
            return False
        return True if stream.input_done and not stream.has_pending_audio() else None

    def _featurize(self, outputs: list[RequestOutput]) -> None:
        todo: list[OnlineStream] = []
        waves: list[torch.Tensor] = []
        for stream in list(self._jobs.values()):
            if not stream.has_pending_audio():
                continue
            new = self._samples(stream, stream.take_audio(), outputs)
            if new is None:
                continue
            stream.samples += len(new)
            wave, stream.wave_tail = join_tail(stream.wave_tail, new, self.frontend.opts)
            todo.append(stream)
            waves.append(wave)
        for stream, f in self._features(todo, waves, self.frontend.fbanks, outputs):
            if len(f):
                stream.fbank = torch.cat([stream.fbank, f])
                stream.fbank_total += len(f)
            self._lfr(stream, final=False)

    def _lfr(self, stream: OnlineStream, final: bool) -> None:
        """Compute the LFR frames whose context has arrived (all of them when `final`)."""
        fe = self.frontend
        stop = fe.lfr_available(stream.fbank_total, final)
        if stop > stream.lfr_done:
            new = fe.lfr_rows(stream.fbank, stream.fbank_base, stream.lfr_done, stop, stream.fbank_total)
            stream.feats = torch.cat([stream.feats, new])
            stream.lfr_done = stop
        # drop the fbank frames no later LFR frame reads
        keep_from = max(stop * fe.cfg.lfr_n - (fe.cfg.lfr_m - 1) // 2, 0)
        if keep_from > stream.fbank_base:
            stream.fbank = stream.fbank[keep_from - stream.fbank_base :]
            stream.fbank_base = keep_from

    def _chunk(self, stream: OnlineStream, final: bool) -> ChunkInput:
        if not final:
            feats, stream.feats = stream.feats[: self.geometry.chunk], stream.feats[self.geometry.chunk :]
            return ChunkInput(stream.state, feats, final=False)
        # FunASR featurizes what is left after the whole chunks only when it is at least one
        # LFR frame of audio; otherwise the final window is the last window's kept frames
        left = stream.samples - stream.chunks * self.stream_chunk_samples
        if left < self.frame_samples:
            return ChunkInput(stream.state, stream.feats[:0], final=True, tail=True)
        self._lfr(stream, final=True)
        return ChunkInput(stream.state, stream.feats, final=True)

    def _advance(self, stream: OnlineStream, final: bool, result: ChunkResult) -> RequestOutput:
        stream.tokens += result.tokens
        stream.logprobs += result.logprobs
        stream.last_advanced = self._step
        if final:
            return self._finish(stream, "stop")
        stream.chunks += 1
        return self._partial(stream)

    # ---- outputs ----

    def _partial(self, stream: OnlineStream) -> RequestOutput:
        tokens, spell = stream.tokens, self.spelling.text
        return partial_output(stream.request, spell(tokens), tokens, spell(tokens[: self.spelling.stable_prefix(tokens)]))

    def _final_output(self, stream: OnlineStream, reason: FinishReason) -> RequestOutput:
        req, tokens, logprobs = stream.request, stream.tokens, stream.logprobs
        return final_output(req, self.spelling.text(tokens), tokens, reason, logprobs=logprobs,
                            **logprob_fields(req, tokens, logprobs, self.spelling.token_bytes))  # fmt: skip

