"""Streaming CTC decoding: greedy and prefix beam search whose state carries across chunks,
plus detokenization and word timings from the CTC alignment."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from engine.types import Alternative, Word

BLANK_ID = 0
"""WeNet's units.txt puts <blank> at index 0."""
NEG_INF = -float("inf")
SP_SPACE = "▁"
"""SentencePiece word-start marker."""


def _logaddexp(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    m = max(a, b)
    return m + math.log1p(math.exp(-abs(a - b)))


@dataclass
class Hypothesis:
    tokens: tuple[int, ...] = ()
    frames: tuple[int, ...] = ()
    """Frame (encoder index) where each token was emitted: its CTC spike."""
    token_logprobs: tuple[float, ...] = ()
    p_blank: float = 0.0
    """log P(prefix, path ends in blank)."""
    p_nonblank: float = NEG_INF
    """log P(prefix, path ends in the prefix's last token)."""

    @property
    def score(self) -> float:
        return _logaddexp(self.p_blank, self.p_nonblank)


@dataclass
class CTCState:
    """Per-stream decoding state, carried from chunk to chunk."""

    beam_size: int
    frames: int = 0
    """Encoder frames decoded so far."""
    beams: list[Hypothesis] = field(default_factory=lambda: [Hypothesis()])
    prev_token: int = BLANK_ID
    """Greedy: argmax of the previous frame (a repeat is not a new token)."""
    greedy_logprob: float = 0.0
    """Greedy: sum of the best path's frame log-probs."""

    def advance(self, log_probs: torch.Tensor) -> None:
        """Consume one chunk's log-probs (T, V) (CPU float)."""
        if self.beam_size == 1:
            self._greedy(log_probs)
        else:
            self._beam(log_probs)
        self.frames += int(log_probs.shape[0])

    def _greedy(self, log_probs: torch.Tensor) -> None:
        best_lp, best = log_probs.max(dim=-1)
        self.greedy_logprob += float(best_lp.double().sum())
        hyp = self.beams[0]
        tokens, frames, lps = list(hyp.tokens), list(hyp.frames), list(hyp.token_logprobs)
        for t, (tok, lp) in enumerate(zip(best.tolist(), best_lp.tolist(), strict=True)):
            if tok != BLANK_ID and tok != self.prev_token:
                tokens.append(tok)
                frames.append(self.frames + t)
                lps.append(lp)
            self.prev_token = tok
        self.beams = [Hypothesis(tuple(tokens), tuple(frames), tuple(lps), NEG_INF, self.greedy_logprob)]

    def _beam(self, log_probs: torch.Tensor) -> None:
        # Only the beam_size best units of a frame can extend a prefix (WeNet's pruning).
        top_lp, top_ids = log_probs.topk(min(self.beam_size, log_probs.shape[-1]), dim=-1)
        for t in range(log_probs.shape[0]):
            frame = self.frames + t
            nxt: dict[tuple[int, ...], _Pending] = {}
            for tok, lp in zip(top_ids[t].tolist(), top_lp[t].tolist(), strict=True):
                for h in self.beams:
                    if tok == BLANK_ID:
                        _add(nxt, h.tokens, h.frames, h.token_logprobs, blank=h.score + lp)
                        continue
                    if h.tokens and tok == h.tokens[-1]:
                        # A repeat collapses onto the same prefix; after a blank it is a new token.
                        _add(nxt, h.tokens, h.frames, h.token_logprobs, nonblank=h.p_nonblank + lp)
                        gain = h.p_blank + lp
                    else:
                        gain = h.score + lp
                    ext = (*h.tokens, tok)
                    _add(nxt, ext, (*h.frames, frame), (*h.token_logprobs, lp), nonblank=gain)
            ranked = sorted(
                nxt.items(), key=lambda kv: _logaddexp(kv[1].p_blank, kv[1].p_nonblank), reverse=True
            )
            self.beams = [
                Hypothesis(tokens, e.frames, e.token_logprobs, e.p_blank, e.p_nonblank)
                for tokens, e in ranked[: self.beam_size]
            ]

    def best(self) -> Hypothesis:
        return self.beams[0]

    def stable_tokens(self) -> tuple[int, ...]:
        """Longest token prefix shared by every beam: every future beam extends one of the
        current ones, so this prefix can only grow."""
        first = self.beams[0].tokens
        n = len(first)
        for h in self.beams[1:]:
            n = min(n, len(h.tokens))
            while n and h.tokens[:n] != first[:n]:
                n -= 1
        return first[:n]

    def confidence(self, h: Hypothesis) -> float:
        """exp(length-normalized log-probability), normalized over frames."""
        return math.exp(h.score / self.frames) if self.frames else 0.0


class Detokenizer:
    """units.txt ids -> text; SentencePiece pieces ('▁' starts a word) or character units."""

    def __init__(self, units: list[str]) -> None:
        self.units = units
        self.special = {i for i, u in enumerate(units) if u.startswith("<") and u.endswith(">")}

    def pieces(self, tokens: tuple[int, ...] | list[int]) -> list[str]:
        return [self.units[t] for t in tokens if t not in self.special]

    def text(self, tokens: tuple[int, ...] | list[int]) -> str:
        return "".join(self.pieces(tokens)).replace(SP_SPACE, " ").strip()

    def words(self, h: Hypothesis, frame_seconds: float) -> list[Word]:
        """Group pieces into words: a piece starting with '▁', or a CJK character, opens one."""
        groups: list[list[int]] = []
        for i, tok in enumerate(h.tokens):
            if tok in self.special:
                continue
            piece = self.units[tok]
            if (
                not groups
                or piece.startswith(SP_SPACE)
                or _is_cjk(piece)
                or _is_cjk(self.units[h.tokens[groups[-1][-1]]])
            ):
                groups.append([i])
            else:
                groups[-1].append(i)
        words = []
        for g in groups:
            text = "".join(self.units[h.tokens[i]] for i in g).replace(SP_SPACE, "")
            if not text:
                continue
            start = h.frames[g[0]] * frame_seconds
            end = (h.frames[g[-1]] + 1) * frame_seconds
            conf = sum(math.exp(h.token_logprobs[i]) for i in g) / len(g)
            words.append(Word(word=text, start=round(start, 3), end=round(end, 3), confidence=conf))
        return words

    def nbest(self, state: CTCState, n: int) -> list[Alternative]:
        return [
            Alternative(text=self.text(h.tokens), confidence=state.confidence(h)) for h in state.beams[:n]
        ]


@dataclass
class _Pending:
    p_blank: float = NEG_INF
    p_nonblank: float = NEG_INF
    best: float = NEG_INF
    """Log-prob of the most likely path merged so far; its alignment is the prefix's."""
    frames: tuple[int, ...] = ()
    token_logprobs: tuple[float, ...] = ()


def _add(
    nxt: dict[tuple[int, ...], _Pending], tokens: tuple[int, ...], frames: tuple[int, ...],
    lps: tuple[float, ...], blank: float = NEG_INF, nonblank: float = NEG_INF,
) -> None:  # fmt: skip
    e = nxt.setdefault(tokens, _Pending())
    e.p_blank = _logaddexp(e.p_blank, blank)
    e.p_nonblank = _logaddexp(e.p_nonblank, nonblank)
    contrib = max(blank, nonblank)
    if contrib > e.best:
        e.best, e.frames, e.token_logprobs = contrib, frames, lps


def _is_cjk(piece: str) -> bool:
    return len(piece) == 1 and "\u4e00" <= piece <= "\u9fff"
