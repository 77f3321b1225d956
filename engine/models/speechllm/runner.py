"""The speech-LLM runner: continuous batching of token decode steps over a paged KV pool.

Per engine step (`execute`):
1. prefill: each request admitted since the last step is featurized, encoded and projected;
   its chat prompt (the audio's embeddings in place of the audio placeholder) runs through the
   decoder once, K/V landing in its blocks, and its search takes the first token;
2. decode: every row of every other running request (requests x beams) advances one token in
   one batched decoder forward, each row reading its history through its block table;
3. update: searches pick the next tokens, beams fork their rows (blocks shared, copied on
   write), finished requests release their blocks and report; greedy requests report a
   partial (the text so far) after every token, for per-token deltas.
Requests join between steps: a new request's prefill runs in the same step as the others'
decode, and it decodes with them from the next step on.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from engine.cache import BlockPool, KVSpec, plan_pool, pool_details
from engine.config import EngineConfig
from engine.device import resolve_device, resolve_dtype
from engine.errors import InvalidRequestError, UnsupportedError
from engine.log_mel import N_SAMPLES
from engine.metrics import stage_timer
from engine.models.speechllm.checkpoint import SpeechLLMCheckpoint, load_checkpoint
from engine.models.speechllm.info import DECODE_METHODS, SAMPLE_RATE, Sizes, model_info
from engine.models.speechllm.longform import (
    LongRequest,
    SegmentText,
    check_long_options,
    plan_segments,
    stitched_output,
)
from engine.models.speechllm.options import SpeechLLMOptions
from engine.models.speechllm.prompt import ASR_TEXT, LANGUAGE_NAMES, PromptSpec, Qwen3ASRPrompt
from engine.models.speechllm.rows import SharedBlocks
from engine.models.speechllm.search import BeamSearch, GreedySearch, Hypothesis
from engine.request import Request, error_output
from engine.runner import ModelInfo, RunnerStats
from engine.types import Alternative, DecodingOptions, FinishReason, RequestOutput
from engine.vad import VoiceActivityModel, load_vad_model

logger = logging.getLogger(__name__)

PROMPT_TEXT_TOKENS = 64
"""Allowance for the chat prompt's text around the audio (system turn, instruction, context)
when sizing a typical request's blocks for `free_slots`."""


@dataclass(eq=False)
class _Running:
    """One decoding unit: a request of one window, or one segment of a longer request."""

    request: Request
    search: GreedySearch | BeamSearch
    audio: np.ndarray
    """The samples this unit's encoder hears (at most one window)."""
    key: str
    """Its key in the runner's table: the request id, or `<id>#<segment>` for a segment."""
    long: LongRequest | None = None
    segment: int = 0
    tables: list[list[int]] = field(default_factory=list)
    """Block table of each row (beam)."""
    pending: list[int] = field(default_factory=list)
    """The token each row feeds at the next decode step."""
    length: int = 0
    """Positions each row has written (prompt + fed tokens)."""
    prefilled: bool = False


class SpeechLLMRunner:
    supports_streaming = False
    stream_chunk_samples = 0
    """Offline only: no live stream is ever released audio."""

    def __init__(self, ckpt: SpeechLLMCheckpoint, config: EngineConfig, device: torch.device,
                 options: SpeechLLMOptions) -> None:  # fmt: skip
        self.ckpt = ckpt
        self.config = config
        self.device = device
        self.options = options
        self.model = ckpt.model
        self.tokenizer = ckpt.tokenizer
        self.sample_rate = SAMPLE_RATE
        self.qwen3 = ckpt.model_type == "qwen3_asr"
        """Qwen3-ASR: its own prompt layout, and a `language <Name><asr_text>` header before the transcript."""
        self.asr_text = self.tokenizer.token_id(ASR_TEXT) if self.qwen3 else None
        dims = self.model.decoder.dims
        dtype = next(self.model.parameters()).dtype
        spec = KVSpec(dims.layers, dims.kv_heads, dims.head_dim, dtype)
        block_size = config.block_size_frames or options.block_size
        self.typical_blocks = math.ceil(
            (PROMPT_TEXT_TOKENS + self.model.audio_tokens(N_SAMPLES) + options.max_new_tokens) / block_size)
        # one sequence per decoder row (beams x requests), each at most a 30 s request's blocks
        self.pool_plan = plan_pool(
            spec, block_size, min_blocks=self.typical_blocks, blocks_per_seq=self.typical_blocks,
            sequences=config.max_decode_rows, max_num_blocks=config.max_num_blocks, device=device,
            gpu_memory_utilization=config.gpu_memory_utilization, cpu_cache_bytes=config.cpu_cache_bytes,
        )  # fmt: skip
        num_blocks = self.pool_plan.num_blocks
        self.pool = BlockPool(spec, num_blocks, block_size, device)
        if num_blocks < 4 * self.typical_blocks:
            logger.warning(
                "KV pool of %d blocks holds %d requests of 30 s at once (%d blocks each): raise cpu_cache_bytes / "
                "gpu_memory_utilization / max_num_blocks to batch more", num_blocks, num_blocks // self.typical_blocks,
                self.typical_blocks)  # fmt: skip
        self.blocks = SharedBlocks(self.pool)
        self.eos = frozenset(ckpt.eos_tokens)
        self._running: dict[str, _Running] = {}
        """Decoding units by key (requests of one window, segments of longer ones)."""
        self._long: dict[str, tuple[Request, LongRequest]] = {}
        """Requests over one window by id: their segments start as the batch has room."""
        self._vad: VoiceActivityModel | None = None
        self.streams_stepped = 0
        self.kv_exhausted_total = 0
        self.decode_rows_last = 0
        """Rows the last decode forward advanced (the batch of the step)."""

    @classmethod
    def from_config(cls, config: EngineConfig, options: SpeechLLMOptions | None = None) -> SpeechLLMRunner:
        device = resolve_device(config)
        ckpt = load_checkpoint(config.resolved_ckpt_dir(), device, resolve_dtype(config, device))
        if config.decode_method not in (None, *DECODE_METHODS):
            raise InvalidRequestError(
                f"decode_method {config.decode_method!r} is not offered by speechllm models (they offer: "
                f"{', '.join(DECODE_METHODS)})")
        return cls(ckpt, config, device, options or SpeechLLMOptions())

    # ---- ModelRunner protocol ----

    def info(self) -> ModelInfo:
        dims, enc_layers = self.model.decoder.dims, len(self.model.audio_tower.layers)  # type: ignore[arg-type]
        sizes = Sizes(encoder_layers=enc_layers, decoder_layers=dims.layers, hidden_size=dims.hidden, vocab_size=dims.vocab)
        info = model_info(self.ckpt.name, self.ckpt.model_type, self.ckpt.weights, sizes, self.config, self.options,
                          sum(p.numel() for p in self.model.parameters()))
        info.details.update(pool_details(self.pool_plan))  # planned from memory at load
        assert info.details["kv_block_tokens"] == self.pool.block_size
        return info

    def stats(self) -> RunnerStats:
        return RunnerStats(
            kv_blocks_used=self.blocks.used, kv_blocks_capacity=self.pool.num_blocks,
            kv_exhausted_total=self.kv_exhausted_total,
            decode_slots_used=sum(len(s.tables) for s in self._running.values()),
            decode_slots_capacity=self.config.max_decode_rows,
        )  # fmt: skip

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        if options.language is not None and options.language not in LANGUAGE_NAMES:
            raise UnsupportedError(
                f"language {options.language!r} is not one this speech-LLM is asked in (known: {', '.join(LANGUAGE_NAMES)})")
        if options.beam_size == 1 and options.n_best > 1:
            raise UnsupportedError("n_best > 1 needs beam search (beam_size >= n_best)")

    def check_duration(self, seconds: float, options: DecodingOptions) -> None:
        """What a request of this length cannot be served with (a window is 30 s; longer audio
        is decoded in segments)."""
        check_long_options(seconds, options)

    def free_slots(self) -> int:
        rows = sum(len(s.tables) for s in self._running.values())
        return max(0, min(self.config.max_decode_rows - rows, self.pool.num_free // self.typical_blocks))

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        outputs = []
        for req in requests:
            audio = req.audio
            if audio is None:
                outputs.append(error_output(req, "admission", "a speech-LLM request needs its whole audio"))
                continue
            if audio.shape[0] <= N_SAMPLES:
                self._running[req.request_id] = _Running(req, self._search(req.decoding), audio, req.request_id)
                continue
            try:
                check_long_options(req.duration, req.decoding)
                with stage_timer("offline.vad"):
                    long = LongRequest(plan_segments(np.asarray(audio, dtype=np.float32), self._vad_model()))
            except Exception as exc:
                outputs.append(error_output(req, "admission", exc))
                continue
            if long.done:  # the VAD heard no speech: nothing to transcribe
                outputs.append(stitched_output(req.request_id, long, True, req.duration, req.decoding, []))
                continue
            self._long[req.request_id] = (req, long)
        return outputs

    def _search(self, opts: DecodingOptions) -> GreedySearch | BeamSearch:
        max_new = min(opts.max_new_tokens or self.options.max_new_tokens, self.options.max_new_tokens)
        if opts.beam_size > 1:
            return BeamSearch(opts.beam_size, self.eos, max_new, self.options.length_penalty)
        return GreedySearch(self.eos, max_new)

    def _vad_model(self) -> VoiceActivityModel:
        if self._vad is None:
            self._vad = load_vad_model(self.options.long_form_vad)
        return self._vad

    def _start_segments(self) -> None:
        """Start the next segments of long requests (oldest first) while each has fewer than
        `long_form_rows` decoding and the pool has room for one more typical request."""
        for req, long in self._long.values():
            while long.pending and self.pool.num_free >= self.typical_blocks:
                in_flight = sum(1 for s in self._running.values() if s.long is long)
                if in_flight >= self.options.long_form_rows:
                    break
                i = long.started
                start, end = long.spans[i]
                key = f"{req.request_id}#{i}"
                self._running[key] = _Running(req, self._search(req.decoding), req.audio[start:end], key, long, i)  # type: ignore[index]
                long.started += 1

    def has_work(self) -> bool:
        return bool(self._running) or any(long.pending for _, long in self._long.values())

    def execute(self) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        self._start_segments()
        new = [s for s in self._running.values() if not s.prefilled]
        old = [s for s in self._running.values() if s.prefilled]
        with torch.inference_mode():
            if old:
                with stage_timer("offline.decode"):
                    outputs += self._decode(old)
            for state in new:
                with stage_timer("offline.prefill"):
                    outputs += self._prefill(state)
        self.streams_stepped = 0
        return outputs

    def release(self, request: Request) -> None:
        self._long.pop(request.request_id, None)
        keys = [k for k, s in self._running.items() if s.request is request or k == request.request_id]
        for key in keys:
            self._release_unit(self._running.pop(key))

    def _release_unit(self, state: _Running) -> None:
        for table in state.tables:
            self.blocks.release(table)
        state.tables = []

    def shutdown(self) -> None:
        for state in list(self._running.values()):
            self.release(state.request)
        self._long.clear()

    # ---- steps ----

    def _prompt_ids(self, options: DecodingOptions, n_audio: int) -> tuple[list[int], int]:
        """The prompt's ids with `n_audio` audio placeholders, and where the first one is."""
        spec = Qwen3ASRPrompt.from_options(options) if self.qwen3 else PromptSpec.from_options(options)
        before, after = spec.render()
        head = self.tokenizer.encode(before)
        return head + [self.ckpt.audio_token] * n_audio + self.tokenizer.encode(after), len(head)

    def _prefill(self, state: _Running) -> list[RequestOutput]:
        """Encode the request's audio and run its prompt; it waits (stays unprefilled) while the
        pool lacks the prompt's blocks, which decoding requests return as they finish."""
        req = state.request
        audio = state.audio
        n_audio = self.model.audio_tokens(audio.shape[0])
        ids, first_audio = self._prompt_ids(req.decoding, n_audio)
        if self.blocks.blocks_for(len(ids) + 1) > self.pool.num_blocks:
            self.release(req)
            return [error_output(req, "admission", f"the prompt ({len(ids)} tokens) does not fit the KV pool "
                           f"({self.pool.num_blocks} blocks of {self.pool.block_size} tokens)")]
        table = self.blocks.allocate(len(ids))
        if table is None:
            return []
        state.tables = [table]
        embeds = self.model.decoder.embed_tokens(torch.tensor(ids, device=self.device))
        embeds[first_audio : first_audio + n_audio] = self.model.audio_embeddings(audio).to(embeds.dtype)
        slots = self.blocks.slots(table, len(ids)).to(self.device)
        logits = self.model.decoder.prefill(embeds, self.pool.k, self.pool.v, slots)
        state.length = len(ids)
        state.prefilled = True
        # every beam starts from the prompt: rows share its blocks
        state.tables += [self.blocks.fork(table) for _ in range(state.search.rows - 1)]
        logprobs = torch.log_softmax(logits[None].float(), dim=-1).expand(state.search.rows, -1)
        return self._advance(state, logprobs)

    def _decode(self, states: list[_Running]) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        ready = []
        for state in states:  # room for each row's next position, or the request ends here
            needed = sum(self.blocks.blocks_to_write(t, state.length) for t in state.tables)
            if needed > self.pool.num_free:
                self.kv_exhausted_total += 1
                outputs += self._finish(state, "length")
                continue
            ready.append(state)
        if not ready:
            return outputs
        slots, tokens, positions, tables = [], [], [], []
        for state in ready:
            for table, token in zip(state.tables, state.pending):
                slots.append(self.blocks.make_writable(table, state.length))
                tokens.append(token)
                positions.append(state.length)
                tables.append(table)
        width = max(len(t) for t in tables)
        block_table = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)
        dev = self.device
        logits = self.model.decoder.decode(
            torch.tensor(tokens, device=dev), torch.tensor(positions, device=dev), self.pool.k, self.pool.v,
            torch.tensor(slots, device=dev), block_table.to(dev), self.pool.block_size,
        )  # fmt: skip
        self.decode_rows_last = len(tokens)
        logprobs = torch.log_softmax(logits, dim=-1)
        row = 0
        for state in ready:
            n = len(state.tables)
            state.length += 1
            outputs += self._advance(state, logprobs[row : row + n])
            row += n
        return outputs

    def _advance(self, state: _Running, logprobs: torch.Tensor) -> list[RequestOutput]:
        """One search step on the request's rows' log-probabilities; fork rows, report."""
        step = state.search.step(logprobs.cpu())
        if state.search.done or state.length + 1 > self.ckpt.max_positions:
            reason: FinishReason = "stop" if state.search.done else "length"
            return self._finish(state, reason)
        old = state.tables
        state.tables = [self.blocks.fork(old[s]) for s in step.sources]
        for table in old:
            self.blocks.release(table)
        state.pending = step.tokens
        if isinstance(state.search, GreedySearch) and state.long is None:  # a segment reports with its request
            return [self._output(state, [state.search.partial()], finished=False)]
        return []

    def _finish(self, state: _Running, reason: FinishReason) -> list[RequestOutput]:
        search = state.search
        hyps = search.best(max(1, state.request.decoding.n_best)) if search.done else [search.partial()]
        if hyps and hyps[0].tokens and hyps[0].tokens[-1] not in self.eos and reason == "stop":
            reason = "length"  # stopped at max_new_tokens, not at an end token
        if state.long is not None:
            return self._finish_segment(state, hyps[0], reason)
        out = self._output(state, hyps, finished=True, reason=reason)
        self.release(state.request)
        return [out]

    def _finish_segment(self, state: _Running, hyp: Hypothesis, reason: FinishReason) -> list[RequestOutput]:
        """Keep a segment's text; report the request's text when its leading segments grew
        (finished once every segment is done)."""
        req, long = state.request, state.long
        assert long is not None
        self._release_unit(self._running.pop(state.key))
        tokens, logprobs, language = self._transcript(hyp, req.decoding)
        long.results[state.segment] = SegmentText(self.tokenizer.decode(tokens), tokens, logprobs, language, reason)
        leading = len(long.leading())
        if leading == long.reported:
            return []
        long.reported = leading
        token_bytes = None
        if req.decoding.logprobs:
            token_bytes = [self.tokenizer.token_bytes(t) for r in long.leading() for t in r.tokens]
        out = stitched_output(req.request_id, long, long.done, req.duration, req.decoding, token_bytes)
        if long.done:
            self.release(req)
        return [out]

    def _output(self, state: _Running, hyps: list[Hypothesis], finished: bool,
                reason: FinishReason | None = None) -> RequestOutput:  # fmt: skip
        req = state.request
        best = hyps[0]
        tokens, logprobs, language = self._transcript(best, req.decoding, finished)
        text = self.tokenizer.decode(tokens)
        if not finished:
            text = text.rstrip("\ufffd")  # a partial may end inside a character: wait for its last byte
        out = RequestOutput(
            request_id=req.request_id, text=text, tokens=tokens, finished=finished, finish_reason=reason,
            duration=req.duration, language=language or req.decoding.language,
            confidence=math.exp(sum(logprobs) / len(logprobs)) if logprobs else None,
            committed=text,  # greedy decoding never takes a token back: its text so far will not change
        )  # fmt: skip
        if req.decoding.logprobs:
            out.token_logprobs = logprobs
            out.token_bytes = [self.tokenizer.token_bytes(t) for t in tokens]
        if finished and req.decoding.beam_size > 1:
            out.nbest = [Alternative(self.tokenizer.decode(self._transcript(h, req.decoding)[0]), math.exp(h.score)) for h in hyps]
        return out

    def _transcript(self, hyp: Hypothesis, options: DecodingOptions,
                    finished: bool = True) -> tuple[list[int], list[float], str | None]:  # fmt: skip
        """The transcript's tokens and log-probabilities (no end token, no Qwen3-ASR header) and
        the language a Qwen3-ASR header names. A finished Qwen3-ASR output that never closed its
        header is all transcript (its processor's reading)."""
        tokens = [t for t in hyp.tokens if t not in self.eos]
        logprobs = hyp.logprobs[: len(tokens)]
        if not self.qwen3 or options.language is not None:  # a forced language's header is in the prompt
            return tokens, logprobs, None
        if self.asr_text not in tokens:  # the model is still writing its header (or wrote none)
            return (tokens, logprobs, None) if finished else ([], [], None)
        cut = tokens.index(self.asr_text) + 1
        header = self.tokenizer.decode(tokens[: cut - 1]).strip()
        name = header[len("language "):].strip() if header.startswith("language ") else ""
        code = next((c for c, n in LANGUAGE_NAMES.items() if n.lower() == name.lower()), None)
        return tokens[cut:], logprobs[cut:], code
