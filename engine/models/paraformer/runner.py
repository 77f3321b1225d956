"""The offline Paraformer runner: every admitted request recognised in one batch.

Per `execute()`: the requests admitted so far (up to `max_batch_size`) are cut into pieces of at
most `max_segment_seconds`; all pieces are featurized in one batched fbank call, padded into one
(B, T, 560) batch (length-sorted, `max_batch_size` rows a forward) and recognised together:
encoder, CIF and decoder each run once per forward. Every request finishes in the step that
runs it. The model is non-autoregressive, so there is nothing to stream token by token, and an
offline checkpoint has no streaming form: live sessions are refused by the engine
(`supports_streaming` False). paraformer-online checkpoints get online_runner.py instead.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from engine.config import EngineConfig
from engine.device import resolve_device, resolve_dtype
from engine.metrics import stage_timer
from engine.models.paraformer.checkpoint import ParaformerCheckpoint, load_checkpoint
from engine.models.paraformer.frontend import WavFrontend
from engine.models.paraformer.hotwords import HotwordSpeller
from engine.models.paraformer.info import offline_info
from engine.models.paraformer.model import Recognized
from engine.models.paraformer.options import ParaformerOptions
from engine.models.paraformer.outputs import Piece, final_output
from engine.models.paraformer.spelling import Spelling
from engine.request import Request, error_output
from engine.runner import ModelInfo, RunnerStats
from engine.types import DecodingOptions, RequestOutput

logger = logging.getLogger(__name__)



class ParaformerRunner:
    supports_streaming = False

    def __init__(self, ckpt: ParaformerCheckpoint, config: EngineConfig, device: torch.device,
                 options: ParaformerOptions | None = None) -> None:  # fmt: skip
        self.ckpt = ckpt
        self.config = config
        self.device = device
        self.options = options or ParaformerOptions()
        self.frontend = WavFrontend(ckpt.config.frontend, ckpt.cmvn, device)
        self.sample_rate = ckpt.config.frontend.sample_rate
        self.stream_chunk_samples = int(self.sample_rate * self.frontend.frame_seconds)
        """Unused (no streaming runtime); one encoder frame of audio, for the protocol."""
        self.streams_stepped = 0
        self.segment_samples = int(self.options.max_segment_seconds * self.sample_rate)
        self.dtype = next(ckpt.model.parameters()).dtype
        self.speller = None if ckpt.config.seaco is None else HotwordSpeller(
            {t: i for i, t in enumerate(ckpt.tokens)}, ckpt.seg_dict, ckpt.config.sos)
        self._running: dict[str, Request] = {}
        self.spelling = Spelling.of(ckpt)

    @classmethod
    def from_config(cls, config: EngineConfig, options: ParaformerOptions | None = None) -> ParaformerRunner:
        device = resolve_device(config)
        ckpt = load_checkpoint(config.resolved_ckpt_dir(), device, resolve_dtype(config, device),
                               config.checkpoint_name)  # fmt: skip
        return cls(ckpt, config, device, options)

    # ---- ModelRunner protocol ----

    def info(self) -> ModelInfo:
        return offline_info(self.ckpt.config, self.ckpt.weights_path, self.spelling.kind, self.options,
                            sum(p.numel() for p in self.ckpt.model.parameters()))

    def stats(self) -> RunnerStats:
        return RunnerStats(decode_slots_used=len(self._running), decode_slots_capacity=self.config.max_batch_size)

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        """What `info.OFFLINE_CAPABILITIES` leaves out is refused at admission (engine/capabilities.py); here only
        hotwords the vocabulary cannot spell (keywords are a capability with the SeACo module)."""
        if options.keywords and self.speller is not None:
            self.speller.hotwords(options.keywords)

    def free_slots(self) -> int:
        return max(self.config.max_batch_size - len(self._running), 0)

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        for req in requests:
            self._running[req.request_id] = req
        return []

    def has_work(self) -> bool:
        return bool(self._running)

    def release(self, request: Request) -> None:
        self._running.pop(request.request_id, None)

    def shutdown(self) -> None:
        self._running.clear()

    # ---- one engine step ----

    def execute(self) -> list[RequestOutput]:
        requests = list(self._running.values())[: self.config.max_batch_size]
        pieces = [p for req in requests for p in self._cut(req)]
        try:
            results = self._recognize(pieces)
        except Exception as exc:
            logger.exception("paraformer batch of %d requests (%d pieces) failed", len(requests), len(pieces))
            outputs = [error_output(req, "encode", exc) for req in requests]
        else:
            with stage_timer("offline.decode"):
                outputs = [
                    final_output(req, [(p, r) for p, r in zip(pieces, results, strict=True) if p.request is req],
                                 self.spelling, self.frontend.frame_seconds)
                    for req in requests
                ]  # fmt: skip
        for req in requests:
            self.release(req)
        return outputs

    def _cut(self, req: Request) -> list[Piece]:
        audio = req.audio if req.audio is not None else np.zeros(0, np.float32)
        n = max(math.ceil(len(audio) / self.segment_samples), 1)
        return [Piece(req, i * self.segment_samples, audio[i * self.segment_samples : (i + 1) * self.segment_samples])
                for i in range(n)]  # fmt: skip

    def _fbank_groups(self, pieces: list[Piece]) -> list[list[Piece]]:
        """Consecutive pieces, at most max_forward_seconds of audio a group (one piece at least):
        the fbank's intermediates of an hour at once would be gigabytes."""
        budget = self.options.max_forward_seconds * self.sample_rate
        groups: list[list[Piece]] = []
        size = 0
        for piece in pieces:
            if not groups or size + len(piece.audio) > budget:
                groups.append([])
                size = 0
            groups[-1].append(piece)
            size += len(piece.audio)
        return groups

    def _recognize(self, pieces: list[Piece]) -> list[Recognized]:
        with stage_timer("offline.collate"):  # batched fbank calls of at most max_forward_seconds of audio each
            feats = [f for group in self._fbank_groups(pieces)
                     for f in self.frontend([torch.from_numpy(np.array(p.audio, dtype=np.float32)) for p in group])]  # fmt: skip
        # a piece too short for one fbank frame yields no tokens without a forward
        results: list[Recognized] = [Recognized([], [], torch.zeros(0), torch.zeros(0)) for _ in pieces]
        order = sorted((i for i in range(len(pieces)) if len(feats[i])), key=lambda i: -len(feats[i]))
        max_frames = int(self.options.max_forward_seconds / self.frontend.frame_seconds)
        for chunk in forwards([len(feats[i]) for i in order], self.config.max_batch_size, self.options.max_pad_ratio,
                              max_frames):  # fmt: skip
            chunk = [order[k] for k in chunk]
            lengths = torch.tensor([len(feats[i]) for i in chunk])
            batch = torch.zeros(len(chunk), int(lengths.max()), self.frontend.dim, device=self.device)
            for row, i in enumerate(chunk):
                batch[row, : len(feats[i])] = feats[i]
            hotwords = None
            if self.speller is not None:
                hotwords = [self.speller.hotwords(pieces[i].request.decoding.keywords) for i in chunk]
            with stage_timer("offline.encode"):
                out = self.ckpt.model.recognize(batch.to(self.dtype), lengths.to(self.device), hotwords)
            for i, r in zip(chunk, out, strict=True):
                results[i] = r
        return results


def forwards(lengths: list[int], max_rows: int, max_pad_ratio: float, max_frames: int | None = None) -> list[list[int]]:
    """Split rows (lengths sorted longest first) into runs of consecutive indices: at most
    `max_rows` each, padded frames (rows x the run's first length) within `max_pad_ratio` x the
    real ones and within `max_frames` (a run's memory; a longer row runs alone)."""
    runs: list[list[int]] = []
    for k, n in enumerate(lengths):
        run = runs[-1] if runs else None
        if run is not None and len(run) < max_rows:
            real = sum(lengths[j] for j in run) + n
            padded = (len(run) + 1) * lengths[run[0]]
            if padded <= max_pad_ratio * real and (max_frames is None or padded <= max_frames):
                run.append(k)
                continue
        runs.append([k])
    return runs
