"""Per-window decoding state of one request: token selection (greedy, sampling, beam search)
and Whisper's logit rules (suppression, timestamp grammar).

A `DecodeGroup` owns the rows of one window job (1 row, or beam_size rows); the batch
(`batch.py`) hands it the logits of its rows each step and applies the row moves it asks for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from engine.types import DecodingOptions

NEG_INF = float("-inf")


@dataclass
class TokenRules:
    """Model-wide facts the logit rules need (built once per runner)."""

    eot: int
    timestamp_begin: int
    no_timestamps: int
    n_vocab: int
    suppress: Tensor  # bool (V,): never generated
    suppress_begin: Tensor  # bool (V,): not as the first sampled token (blank, eot)
    max_initial_timestamp_index: int = 50  # 1.0 s / 0.02 s


@dataclass
class WindowResult:
    tokens: list[int]
    """Sampled tokens without the trailing end-of-text."""
    sum_logprob: float
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    nbest: list[tuple[list[int], float]] = field(default_factory=list)
    """(tokens, length-normalized logprob) best first, beam search only."""


class DecodeGroup:
    """Rows decoding one window of one request."""

    def __init__(
        self,
        job: object,
        prefix: list[int],
        sot_index: int,
        options: DecodingOptions,
        temperature: float,
        rules: TokenRules,
        timestamps: bool,
        max_new_tokens: int,
        generator: torch.Generator | None,
    ):
        self.job = job
        self.prefix = prefix
        self.sot_index = sot_index
        self.options = options
        self.temperature = temperature
        self.rules = rules
        self.timestamps = timestamps
        self.max_new_tokens = max_new_tokens
        self.generator = generator
        self.beam = options.beam_size if temperature == 0.0 else 1
        self.num_rows = self.beam
        self.tokens: list[list[int]] = [[] for _ in range(self.num_rows)]
        self.sum_logprobs = [0.0] * self.num_rows
        self.finished_beams: dict[tuple[int, ...], float] = {}
        self.no_speech_prob = 0.0
        self.done = False
        self.result: WindowResult | None = None

    # ---- per-step interface used by the batch ----

    def positions(self) -> list[int]:
        return [len(self.prefix) + len(t) - 1 for t in self.tokens]

    def last_tokens(self) -> list[int]:
        return [t[-1] if t else self.prefix[-1] for t in self.tokens]

    def set_no_speech(self, sot_logits: Tensor, no_speech_token: int) -> None:
        self.no_speech_prob = float(torch.softmax(sot_logits.float(), dim=-1)[no_speech_token])

    def advance(self, logits: Tensor) -> list[int]:
        """Consume logits (rows, V) of this step; returns, for each of this group's rows, which of
        its previous rows it continues (beam reordering). Sets `done` when the window is decoded."""
        logits = self._apply_rules(logits)
        logprobs = torch.log_softmax(logits, dim=-1)
        if self.beam > 1:
            return self._advance_beam(logprobs)
        if self.temperature > 0.0:
            token = int(self._sample(logits[0]))
        else:
            token = int(logits[0].argmax())
        lp = float(logprobs[0, token])
        if not self.tokens[0] or self.tokens[0][-1] != self.rules.eot:
            self.sum_logprobs[0] += lp
        self.tokens[0].append(token)
        if token == self.rules.eot or len(self.tokens[0]) >= self.max_new_tokens:
            self._finish_single()
        return [0]

    # ---- token selection ----

    def _sample(self, logits: Tensor) -> Tensor:
        logits = logits / self.temperature
        if self.options.top_k is not None:
            kth = torch.topk(logits, min(self.options.top_k, logits.shape[-1])).values[-1]
            logits = logits.masked_fill(logits < kth, NEG_INF)
        if self.options.top_p is not None and self.options.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True)
            cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
            remove = cumulative - torch.softmax(sorted_logits, dim=-1) > self.options.top_p
            logits = logits.masked_fill(torch.zeros_like(remove).scatter(0, order, remove), NEG_INF)
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator)[0]

    def _advance_beam(self, logprobs: Tensor) -> list[int]:
        eot = self.rules.eot
        candidates: dict[tuple[int, ...], tuple[float, int]] = {}
        first_step = not self.tokens[0]
        rows = 1 if first_step else self.num_rows  # all beams are identical before the first token
        top_lp, top_tok = logprobs[:rows].topk(self.beam + 1, dim=-1)
        for i in range(rows):
            for lp, tok in zip(top_lp[i].tolist(), top_tok[i].tolist()):
                seq = (*self.tokens[i], tok)
                score = self.sum_logprobs[i] + lp
                if seq not in candidates or candidates[seq][0] < score:
                    candidates[seq] = (score, i)
        sources: list[int] = []
        new_tokens: list[list[int]] = []
        new_sums: list[float] = []
        for seq, (score, src) in sorted(candidates.items(), key=lambda kv: kv[1][0], reverse=True):
            if seq[-1] == eot:
                if len(self.finished_beams) < self.beam:
                    self.finished_beams[seq[:-1]] = score
            else:
                sources.append(src)
                new_tokens.append(list(seq))
                new_sums.append(score)
            if len(new_tokens) == self.beam:
                break
        self.tokens, self.sum_logprobs = new_tokens, new_sums
        if len(self.finished_beams) >= self.beam or len(self.tokens[0]) >= self.max_new_tokens:
            self._finish_beam()
        return sources

    # ---- logit rules ----

    def _apply_rules(self, logits: Tensor) -> Tensor:
        r = self.rules
        logits = logits.float().clone()
        logits[:, r.suppress] = NEG_INF
        at_begin = not self.tokens[0]
        if at_begin:
            logits[:, r.suppress_begin] = NEG_INF
        if not self.timestamps:
            return logits
        logits[:, r.no_timestamps] = NEG_INF
        for row, seq in enumerate(self.tokens):
            last_ts = len(seq) >= 1 and seq[-1] >= r.timestamp_begin
            penult_ts = len(seq) < 2 or seq[-2] >= r.timestamp_begin
            if last_ts:
                if penult_ts:
                    logits[row, r.timestamp_begin :] = NEG_INF
                else:
                    logits[row, : r.eot] = NEG_INF
            stamps = [t for t in seq if t >= r.timestamp_begin]
            if stamps:
                # timestamps never go backwards; a closing one may repeat the opening one
                floor = stamps[-1] if last_ts and not penult_ts else stamps[-1] + 1
                logits[row, r.timestamp_begin : floor] = NEG_INF
        if at_begin:
            logits[:, : r.timestamp_begin] = NEG_INF
            logits[:, r.timestamp_begin + r.max_initial_timestamp_index + 1 :] = NEG_INF
        logprobs = torch.log_softmax(logits, dim=-1)
        ts_mass = logprobs[:, r.timestamp_begin :].logsumexp(dim=-1)
        text_max = logprobs[:, : r.timestamp_begin].max(dim=-1).values
        force_ts = ts_mass > text_max
        if bool(force_ts.any()):
            logits[force_ts, : r.timestamp_begin] = NEG_INF
        return logits

    # ---- results ----

    def _finish_single(self) -> None:
        toks = self.tokens[0]
        if toks and toks[-1] == self.rules.eot:
            toks = toks[:-1]
        total = self.sum_logprobs[0]
        self.result = WindowResult(
            tokens=toks,
            sum_logprob=total,
            avg_logprob=total / (len(toks) + 1),
            no_speech_prob=self.no_speech_prob,
            temperature=self.temperature,
        )
        self.done = True

    def _finish_beam(self) -> None:
        finished = dict(self.finished_beams)
        if not finished:  # ran out of length: take the live beams
            for seq, lp in zip(self.tokens, self.sum_logprobs):
                finished[tuple(seq)] = lp
        ranked = sorted(finished.items(), key=lambda kv: kv[1] / max(1, len(kv[0])), reverse=True)
        best, best_lp = ranked[0]
        self.result = WindowResult(
            tokens=list(best),
            sum_logprob=best_lp,
            avg_logprob=best_lp / (len(best) + 1),
            no_speech_prob=self.no_speech_prob,
            temperature=self.temperature,
            nbest=[(list(seq), lp / max(1, len(seq))) for seq, lp in ranked],
        )
        self.done = True


def length_normalized_confidence(score: float) -> float:
    return float(math.exp(max(score, -50.0)))
