"""Token search of one request over its decoder rows: greedy (one row) or beam (one row per beam).

Each `step` takes the log-probabilities of the request's rows (rows, vocab) and says which row
each next row continues (`sources`) and the token it feeds, so the runner can fork the rows'
KV blocks. The beam search is Transformers' (its `_beam_search`, with `length_penalty`,
`early_stopping=False` and its stopping heuristic) so n-best lists match the reference's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

MASKED = -1.0e9
"""The reference's score of an impossible candidate (added, not assigned: order is kept)."""


@dataclass
class Hypothesis:
    tokens: list[int]
    """Generated tokens, the end token included when the hypothesis ended with one."""
    logprobs: list[float]
    score: float
    """Sum of token log-probabilities over length ** length_penalty (greedy: the plain sum)."""


@dataclass
class Step:
    sources: list[int]
    """Row i of the next step continues old row sources[i]."""
    tokens: list[int]
    """The token row i feeds next."""


@dataclass
class GreedySearch:
    eos: frozenset[int]
    max_new_tokens: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    done: bool = False

    @property
    def rows(self) -> int:
        return 1

    def step(self, logprobs: Tensor) -> Step:
        token = int(logprobs[0].argmax())
        self.tokens.append(token)
        self.logprobs.append(float(logprobs[0, token]))
        self.done = token in self.eos or len(self.tokens) >= self.max_new_tokens
        return Step([] if self.done else [0], [] if self.done else [token])

    def best(self, n: int) -> list[Hypothesis]:
        return [Hypothesis(list(self.tokens), list(self.logprobs), sum(self.logprobs))]

    def partial(self) -> Hypothesis:
        return self.best(1)[0]


class BeamSearch:
    """Transformers' beam search for one request (batch of one): `beams` running rows, the
    `beams` best finished hypotheses kept, candidates `max(2, 1 + len(eos)) * beams` per step."""

    def __init__(self, beams: int, eos: frozenset[int], max_new_tokens: int, length_penalty: float = 1.0) -> None:
        self.beams = beams
        self.eos = torch.tensor(sorted(eos))
        self.max_new_tokens = max_new_tokens
        self.length_penalty = length_penalty
        self.candidates = max(2, 1 + len(eos)) * beams
        self.running_scores = torch.full((beams,), MASKED)
        self.running_scores[0] = 0.0  # only the first beam's tokens are candidates at the first step
        self.running: list[tuple[list[int], list[float]]] = [([], []) for _ in range(beams)]
        self.finished_scores = torch.full((beams,), MASKED)
        self.finished_flags = torch.zeros(beams, dtype=torch.bool)
        self.finished: list[tuple[list[int], list[float]]] = [([], []) for _ in range(beams)]
        self.improvable = True
        self.generated = 0
        self.done = False

    @property
    def rows(self) -> int:
        return self.beams

    def step(self, logprobs: Tensor) -> Step:
        vocab = logprobs.shape[-1]
        scores = (logprobs.float().cpu() + self.running_scores[:, None]).reshape(-1)
        values, index = torch.topk(scores, self.candidates)
        beam, token = index // vocab, index % vocab
        hits = torch.isin(token, self.eos) | (self.generated + 1 >= self.max_new_tokens)
        candidates = [
            (self.running[b][0] + [t], self.running[b][1] + [float(logprobs[b, t])])
            for b, t in zip(beam.tolist(), token.tolist())
        ]
        # the beams that go on: the best candidates that did not stop
        running_values = values + hits.float() * MASKED
        keep = torch.topk(running_values, self.beams).indices
        self.running_scores = running_values[keep]
        self.running = [candidates[k] for k in keep.tolist()]
        # the finished: stopped candidates among the first `beams`, merged with those kept so far
        final = values / float(self.generated + 1) ** self.length_penalty
        final = final + float(not self.improvable) * MASKED
        just_finished = hits & (torch.arange(self.candidates) < self.beams)
        final = final + (~just_finished).float() * MASKED
        merged_scores = torch.cat((self.finished_scores, final))
        merged_flags = torch.cat((self.finished_flags, just_finished))
        merged = self.finished + candidates
        top = torch.topk(merged_scores, self.beams).indices
        self.finished_scores, self.finished_flags = merged_scores[top], merged_flags[top]
        self.finished = [merged[i] for i in top.tolist()]
        self.generated += 1
        best_possible = self.running_scores[0] / float(self.generated) ** self.length_penalty
        worst = torch.where(self.finished_flags, self.finished_scores.min(), torch.tensor(MASKED))
        self.improvable = self.improvable and bool((best_possible > worst).any())
        self.done = not self.improvable or bool(hits.all())
        if self.done:
            return Step([], [])
        return Step(beam[keep].tolist(), token[keep].tolist())

    def best(self, n: int) -> list[Hypothesis]:
        return [Hypothesis(list(t), list(lp), float(s))
                for (t, lp), s in zip(self.finished[:n], self.finished_scores[:n].tolist())]

    def partial(self) -> Hypothesis:
        tokens, logprobs = self.running[0]
        return Hypothesis(list(tokens), list(logprobs), float(self.running_scores[0]))
