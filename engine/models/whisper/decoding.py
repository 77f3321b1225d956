"""Per-window decoding state of one request: token selection (greedy, sampling, beam search)
and Whisper's logit rules (suppression, timestamp grammar).

A `DecodeGroup` owns the rows of one window job (1 row greedy, beam_size rows, or best_of
sampled candidates); the batch
(`batch.py`) hands it the logits of its rows each step and applies the row moves it asks for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from engine.models.whisper.features import SECONDS_PER_TOKEN
from engine.models.whisper.tokenizer import WhisperTokenizer
from engine.models.whisper.window import WindowJob, WindowResult, decode_rows
from engine.types import DecodingOptions

NEG_INF = float("-inf")
EOT_HOLD_MARGIN_S = 1.0
"""Speech (s) the VAD hears after a window's last timestamp that keeps its text from ending there
on a timestamp pair (`speech_eot_floor`). tiny.en often ends a 30 s window's text a whole sentence
before its speech ends (it opens a segment and writes end-of-text): openai/whisper's loop then
decodes that sentence again as the next window, one more encoder pass and prefill on the chain
of a long recording's window. Where the VAD cut the window at a silence after its speech, that
sentence is written in the same decode instead. Only that end is held: an end after text or after
a single closing timestamp takes the whole window (no remainder), and holding it made a prompted
window, written as one segment without inner timestamps, loop to the token limit. Less speech
than this after the last timestamp is left as before (a word's tail, or speech the VAD heard and
the model does not)."""


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

    @classmethod
    def for_tokenizer(cls, tok: WhisperTokenizer, n_vocab: int, suppress_ids: list[int] | None,
                      begin_ids: list[int] | None, device: torch.device) -> TokenRules:
        """The checkpoint's suppression lists (or Whisper's defaults) plus the special tokens."""
        suppress = torch.zeros(n_vocab, dtype=torch.bool, device=device)
        ids = [*(suppress_ids or []), tok.transcribe, tok.translate, tok.sot, tok.sot_prev, tok.sot_lm,
               tok.no_speech, *tok.language_tokens.values()]
        suppress[[i for i in ids if 0 <= i < n_vocab]] = True
        begin = torch.zeros(n_vocab, dtype=torch.bool, device=device)
        begin[[i for i in (begin_ids or [*tok.space_tokens, tok.eot]) if 0 <= i < n_vocab]] = True
        return cls(eot=tok.eot, timestamp_begin=tok.timestamp_begin, no_timestamps=tok.no_timestamps,
                   n_vocab=n_vocab, suppress=suppress, suppress_begin=begin)


def ruled_log_softmax(rules: TokenRules, logits: Tensor, seqs: list[list[int]],
                      timestamps: list[bool], eot_floors: list[int | None] | None = None) -> tuple[Tensor, Tensor]:
    """Whisper's logit rules for a step of many rows at once (`seqs[i]` are row i's sampled tokens
    so far and `timestamps[i]` whether it decodes with timestamps): new float logits with the
    rules applied, and their log-softmax. A timestamped row with an `eot_floors[i]` does not end
    on a timestamp pair below it (DecodeGroup.eot_floor).

    One call per decoder step for the whole batch: per-row calls cost about 1 ms each on a CPU,
    a quarter of a batched 8-row step of tiny.en. The rules mask whole rows' text or timestamp
    ranges, so they are applied as row fills of those column ranges rather than as (rows, V)
    masks: a beam step has 5 rows per request, and each pass over (rows, V) costs as much as a
    decoder layer."""
    logits = logits.float().clone()
    device = logits.device
    logits.masked_fill_(rules.suppress, NEG_INF)
    begin = [i for i, s in enumerate(seqs) if not s]
    if begin:
        index = torch.tensor(begin, device=device)
        logits[index] = logits[index].masked_fill_(rules.suppress_begin, NEG_INF)
    if not any(timestamps):
        return logits, torch.log_softmax(logits, dim=-1)
    tb = rules.timestamp_begin
    no_ts = [i for i, t in enumerate(timestamps) if t]
    logits[:, rules.no_timestamps].index_fill_(0, torch.tensor(no_ts, device=device), NEG_INF)
    text_off: list[int] = []
    stamps_off: list[int] = []
    floors: list[int] = []
    held: list[int] = []  # rows that would end on a timestamp pair well before their speech ends
    for i, seq in enumerate(seqs):
        if not timestamps[i]:
            floors.append(tb)
            continue
        last = len(seq) >= 1 and seq[-1] >= tb
        penult = len(seq) < 2 or seq[-2] >= tb
        stamp = next((t for t in reversed(seq) if t >= tb), None)
        eot_floor = eot_floors[i] if eot_floors else None
        if eot_floor is not None and last and penult and stamp is not None and stamp < eot_floor:
            # an end right after a timestamp pair leaves the window's audio from that timestamp
            # to be decoded again (openai/whisper's seek); after text, or a single closing
            # timestamp, an end takes the whole window and is left free
            held.append(i)
        if last:
            # a timestamp pair is closed (penult too: next comes text) or open (next: its closing
            # timestamp or eot)
            (stamps_off if penult else text_off).append(i)
        # timestamps never go backwards; a closing one may repeat the opening one
        floors.append(tb if stamp is None else stamp if last and not penult else stamp + 1)
    _fill_rows(logits[:, tb:], stamps_off)
    _fill_rows(logits[:, : rules.eot], text_off)
    _fill_rows(logits[:, rules.eot : rules.eot + 1], held)
    stamps = logits[:, tb:]
    below_floor = torch.arange(stamps.shape[1], device=device)[None, :] < (torch.tensor(floors, device=device) - tb)[:, None]
    stamps.masked_fill_(below_floor, NEG_INF)
    first = [i for i in begin if timestamps[i]]  # the first token is a timestamp, and an early one
    _fill_rows(logits[:, :tb], first)
    _fill_rows(logits[:, tb + rules.max_initial_timestamp_index + 1 :], first)
    logprobs = torch.log_softmax(logits, dim=-1)
    ts_mass = logprobs[:, tb:].logsumexp(dim=-1)
    text_max = logprobs[:, :tb].max(dim=-1).values
    force_ts = (ts_mass > text_max) & torch.tensor(timestamps, device=device)
    forced = force_ts.nonzero()[:, 0]
    if forced.numel():
        logits[:, :tb].index_fill_(0, forced, NEG_INF)
        logprobs[forced] = torch.log_softmax(logits[forced], dim=-1)
    return logits, logprobs


def text_may_end_at(speech_until: float, seconds: float) -> bool:
    """Whether a window whose speech runs until `speech_until` s may end its text at `seconds`
    into it: within EOT_HOLD_MARGIN_S of the speech's end."""
    return speech_until - seconds < EOT_HOLD_MARGIN_S


def speech_eot_floor(speech_until: float | None, timestamp_begin: int) -> int | None:
    """The timestamp token before which a window whose speech runs until `speech_until` s does
    not end its text (None: it may end anywhere): where `text_may_end_at` starts to hold."""
    if speech_until is None or speech_until <= EOT_HOLD_MARGIN_S:  # too little speech to hold anything
        return None
    return timestamp_begin + math.floor((speech_until - EOT_HOLD_MARGIN_S) / SECONDS_PER_TOKEN)


def _fill_rows(columns: Tensor, rows: list[int]) -> None:
    """Set `rows` of the column range `columns` (a view of the logits) to -inf, in place."""
    if rows:
        columns.index_fill_(0, torch.tensor(rows, device=columns.device), NEG_INF)


class DecodeGroup:
    """Rows decoding one window of one request."""

    def __init__(
        self,
        job: WindowJob,
        prefix: list[int],
        sot_index: int,
        options: DecodingOptions,
        temperature: float,
        rules: TokenRules,
        timestamps: bool,
        max_new_tokens: int,
        generator: torch.Generator | None,
        forced: list[int] | None = None,
        draft: list[int] | None = None,
        eot_floor: int | None = None,
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
        self.forced = forced or []  # text tokens at the end of the prefix, ruled as if sampled
        self.eot_floor = eot_floor
        """Timestamp token below which no row ends its text on a timestamp pair (`speech_eot_floor`;
        None: any time)."""
        self.beam = options.beam_size if temperature == 0.0 else 1
        # a sampled window draws best_of independent candidates and keeps the most likely one
        self.num_rows = decode_rows(options, temperature)
        greedy = temperature == 0.0 and self.num_rows == 1
        self.draft = (draft or [])[:max_new_tokens] if greedy else []
        """Tokens the prefill reads after the prefix, for `accept_draft` (greedy windows only)."""
        self.tokens: list[list[int]] = [[] for _ in range(self.num_rows)]
        self.sum_logprobs = [0.0] * self.num_rows
        self.token_logprobs: list[list[float]] = [[] for _ in range(self.num_rows)]
        self.finished_beams: dict[tuple[int, ...], float] = {}
        self.finished_logprobs: dict[tuple[int, ...], list[float]] = {}
        self.no_speech_prob = 0.0
        self.done = False
        self.result: WindowResult | None = None
        self.checked_at = 0  # tokens (of its longest row) when the rows were last checked for a loop (offline.cut_runaways)
        self.row_budgets: dict[int, int] = {}  # sampled rows cut short: row -> its own token budget

    @classmethod
    def for_job(cls, job: WindowJob, rules: TokenRules, n_text_ctx: int) -> DecodeGroup:
        """The rows that decode `job`: its prompt, options and token budget (at most half the
        text context, and never past its end)."""
        options = job.owner.options
        max_new = min(options.max_new_tokens or n_text_ctx // 2, n_text_ctx - len(job.prefix) - 1)
        budget = job.owner.token_budget(job.frames)
        if budget is not None:
            max_new = min(max_new, budget)
        return cls(
            job=job,
            prefix=job.prefix,
            sot_index=job.sot_index,
            options=options,
            temperature=job.temperature,
            rules=rules,
            timestamps=not job.forced,
            max_new_tokens=max(1, max_new),
            forced=job.forced,
            draft=job.draft,
            eot_floor=speech_eot_floor(job.speech_until, rules.timestamp_begin) if not job.forced else None,
            generator=job.generator if job.generator is not None else job.owner.generator,
        )

    # ---- per-step interface used by the batch ----

    def positions(self) -> list[int]:
        return [len(self.prefix) + len(t) - 1 for t in self.tokens]

    def ruled_sequences(self) -> list[list[int]]:
        """Each row's tokens as the logit rules see them: forced ones count as sampled."""
        return [self.forced + t for t in self.tokens] if self.forced else self.tokens

    def candidates(self) -> list[list[int]]:
        """Every text the window can still end as a prefix of: each row's tokens so far and the
        beams already finished."""
        return [*self.tokens, *(list(t) for t in self.finished_beams)]

    def cut_short(self, rows: Iterable[int] | None = None) -> None:
        """End at the next token, as if the token budget ran out there: every row (None, and
        always a beam's, whose rows trade places), or the sampled (or greedy) `rows` given, each
        a candidate of its own that the others do not wait on past its cut."""
        if rows is None or self.beam > 1:
            self.max_new_tokens = min(self.max_new_tokens, len(self.tokens[0]) + 1)
            return
        for row in rows:
            self.row_budgets[row] = min(self.row_budgets.get(row, self.max_new_tokens), len(self.tokens[row]) + 1)

    def last_tokens(self) -> list[int]:
        return [t[-1] if t else self.prefix[-1] for t in self.tokens]

    def set_no_speech(self, sot_logits: Tensor, no_speech_token: int) -> None:
        self.no_speech_prob = float(torch.softmax(sot_logits.float(), dim=-1)[no_speech_token])

    def advance(self, logits: Tensor, logprobs: Tensor) -> list[int]:
        """Consume this step's logits (rows, V), ruled by `ruled_log_softmax`, and their log-softmax;
        returns, for each of this group's rows, which of its previous rows it continues (beam
        reordering). Sets `done` when the window is decoded."""
        if self.beam > 1:
            return self._advance_beam(logprobs)
        if self.temperature > 0.0:
            chosen = self._sample(logits).tolist()
        else:
            chosen = [_first_max(logits[0])]
        for row, token in enumerate(chosen):
            if self.tokens[row] and self._complete(row):
                continue  # this candidate is complete: its row idles until the others are
            self._append(row, token, float(logprobs[row, token]))
        if all(self._complete(row) for row in range(self.num_rows)):
            self._finish_sampled()
        return list(range(self.num_rows))

    def accept_draft(self, logits: Tensor, logprobs: Tensor) -> None:
        """The prefill's ruled logits (D + 1, V) at the end of the prefix and after each of the
        D draft tokens (row j: after draft[:j]): take the greedy choice at each position while it
        is the draft's token, then the one choice that differs (or follows the whole draft). The
        tokens are those one step at a time would have chosen, up to rounding (the prefill's
        attention sums in another order: a near tie may go the other way); decoding goes on
        from there."""
        for j in range(logits.shape[0]):
            token = _first_max(logits[j])
            self._append(0, token, float(logprobs[j, token]))
            if self._complete(0) or j >= len(self.draft) or token != self.draft[j]:
                break
        if self._complete(0):
            self._finish_sampled()

    def _append(self, row: int, token: int, logprob: float) -> None:
        self.tokens[row].append(token)
        self.token_logprobs[row].append(logprob)
        self.sum_logprobs[row] += logprob

    def _complete(self, row: int) -> bool:
        """A sampled or greedy candidate ended: end of text, or its token budget spent."""
        tokens = self.tokens[row]
        return tokens[-1] == self.rules.eot or len(tokens) >= self.row_budgets.get(row, self.max_new_tokens)

    # ---- token selection ----

    def _sample(self, logits: Tensor) -> Tensor:
        """One token per row of `logits` (rows, V), drawn from its tempered (top-k / top-p
        filtered) distribution by inverting its cumulative sum at a uniform draw: one draw per row,
        rows in order, from this group's generator. `torch.multinomial` draws an exponential per
        vocabulary entry instead (measured: 1.1 ms a row on a CPU, 15 % of the dev set's offline
        time, where the windows that fall back sample 25 rows for every step)."""
        logits = logits / self.temperature
        if self.options.top_k is not None:
            kth = torch.topk(logits, min(self.options.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, NEG_INF)
        if self.options.top_p is not None and self.options.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            sorted_probs = torch.softmax(sorted_logits, dim=-1)
            remove = sorted_probs.cumsum(-1) - sorted_probs > self.options.top_p
            logits = logits.masked_fill(torch.zeros_like(remove).scatter(-1, order, remove), NEG_INF)
        cumulative = torch.softmax(logits, dim=-1, dtype=torch.float64).cumsum(-1)  # float64: exact to 1e-12
        total = cumulative[:, -1:].contiguous()
        if not bool((total > 0).all()):
            raise ValueError("sampling from a row whose every token is suppressed")
        draw = torch.rand(logits.shape[0], 1, generator=self.generator, device=logits.device, dtype=torch.float64)
        # right=True: a token of probability 0 spans an empty interval and is never drawn; the
        # last token of positive probability bounds a draw that rounds up to the total
        chosen = torch.searchsorted(cumulative, draw * total, right=True)
        return torch.minimum(chosen, torch.searchsorted(cumulative, total))[:, 0]

    def _advance_beam(self, logprobs: Tensor) -> list[int]:
        eot = self.rules.eot
        candidates: dict[tuple[int, ...], tuple[float, int, float]] = {}
        first_step = not self.tokens[0]
        rows = 1 if first_step else self.num_rows  # all beams are identical before the first token
        top_lp, top_tok = logprobs[:rows].topk(self.beam + 1, dim=-1)
        for i in range(rows):
            for lp, tok in zip(top_lp[i].tolist(), top_tok[i].tolist()):
                seq = (*self.tokens[i], tok)
                score = self.sum_logprobs[i] + lp
                if seq not in candidates or candidates[seq][0] < score:
                    candidates[seq] = (score, i, lp)
        sources: list[int] = []
        new_tokens: list[list[int]] = []
        new_sums: list[float] = []
        new_lps: list[list[float]] = []
        for seq, (score, src, lp) in sorted(candidates.items(), key=lambda kv: kv[1][0], reverse=True):
            if seq[-1] == eot:
                if len(self.finished_beams) < self.beam:
                    self.finished_beams[seq[:-1]] = score
                    self.finished_logprobs[seq[:-1]] = self.token_logprobs[src]
            else:
                sources.append(src)
                new_tokens.append(list(seq))
                new_sums.append(score)
                new_lps.append([*self.token_logprobs[src], lp])
            if len(new_tokens) == self.beam:
                break
        self.tokens, self.sum_logprobs, self.token_logprobs = new_tokens, new_sums, new_lps
        if len(self.finished_beams) >= self.beam or len(self.tokens[0]) >= self.max_new_tokens:
            self._finish_beam()
        return sources

    # ---- results ----

    def _finish_sampled(self) -> None:
        """The greedy decode, or the best of the sampled candidates: the highest log-probability
        per token (end-of-text excluded from the length), as openai/whisper ranks them and
        CTranslate2 sorts faster-whisper's best_of hypotheses (length_penalty 1), among the
        candidates that ended on their own if any did. A candidate cut short as a runaway
        (offline.cut_runaways) fails its window's compression check already, and a
        loop is the likeliest text per token: ranked first, it failed the attempt for certain
        and the window went on to a hotter temperature (a 601 s recording as 16-bit samples:
        7.5 -> 6.8 s, WER 11.83 -> 11.71 %)."""
        eot = self.rules.eot
        texts = [t[:-1] if t[-1] == eot else t for t in self.tokens]
        best = max(range(self.num_rows), key=lambda i: (i not in self.row_budgets,
                                                         self.sum_logprobs[i] / max(1, len(texts[i]))))
        toks, total = texts[best], self.sum_logprobs[best]
        self.result = WindowResult(
            tokens=toks,
            sum_logprob=total,
            avg_logprob=total / (len(toks) + 1),
            no_speech_prob=self.no_speech_prob,
            temperature=self.temperature,
            token_logprobs=self.token_logprobs[best][: len(toks)],
        )
        self.done = True

    def _finish_beam(self) -> None:
        finished = dict(self.finished_beams)
        logprobs = dict(self.finished_logprobs)
        if not finished:  # ran out of length: take the live beams
            for seq, lp, lps in zip(self.tokens, self.sum_logprobs, self.token_logprobs):
                finished[tuple(seq)] = lp
                logprobs[tuple(seq)] = lps
        ranked = sorted(finished.items(), key=lambda kv: kv[1] / max(1, len(kv[0])), reverse=True)
        best, best_lp = ranked[0]
        self.result = WindowResult(
            tokens=list(best),
            sum_logprob=best_lp,
            avg_logprob=best_lp / (len(best) + 1),
            no_speech_prob=self.no_speech_prob,
            temperature=self.temperature,
            nbest=[(list(seq), lp / max(1, len(seq))) for seq, lp in ranked],
            token_logprobs=logprobs[best],
        )
        self.done = True


def length_normalized_confidence(score: float) -> float:
    return float(math.exp(max(score, -50.0)))


def _first_max(row: Tensor) -> int:
    """The index of a row's first largest value, as `argmax`: torch.max along a dimension finds it
    in a third of argmax's time on a CPU (measured: 25 vs 75 us over the 51864 logits, a call per
    window per step)."""
    return int(torch.max(row, 0).indices)
