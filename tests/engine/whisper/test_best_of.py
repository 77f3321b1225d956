"""A sampled window draws `best_of` candidates side by side and keeps the most likely per token
(openai/whisper's and faster-whisper's best_of), on synthetic logits whose every row is certain
of its token, so what each candidate samples is known and its score is the log-probabilities fed."""

from __future__ import annotations

from typing import Any

import torch

from engine.models.whisper.decoding import DecodeGroup
from engine.types import DecodingOptions
from tests.engine.whisper.test_logit_rules import EOT, V, rules

SOT = 11


def group(options: DecodingOptions, temperature: float) -> DecodeGroup:
    job: Any = None  # the group only carries its job for the batch
    return DecodeGroup(job, [SOT], 0, options, temperature, rules(), timestamps=False, max_new_tokens=8,
                       generator=torch.Generator().manual_seed(0))


def step(g: DecodeGroup, tokens: list[int], logprobs: list[float]) -> list[int]:
    """One step in which row i can only sample tokens[i], scored logprobs[i]."""
    logits = torch.full((len(tokens), V), -torch.inf)
    scores = torch.full((len(tokens), V), -torch.inf)
    for row, (tok, lp) in enumerate(zip(tokens, logprobs)):
        logits[row, tok] = 0.0
        scores[row, tok] = lp
    return g.advance(logits, scores)


def test_the_candidate_most_likely_per_token_is_kept() -> None:
    g = group(DecodingOptions(temperature=0.5, best_of=3), 0.5)
    assert g.num_rows == 3
    assert step(g, [1, 2, 4], [-1.0, -0.5, -0.2]) == [0, 1, 2]
    step(g, [EOT, 3, EOT], [-1.0, -0.5, -2.0])  # rows 0 and 2 complete: -2.0 and -2.2 per token
    assert not g.done
    step(g, [5, EOT, 5], [-0.1, -0.5, -0.1])  # complete rows ignore what they sample
    assert g.done and g.tokens[0] == [1, EOT] and g.tokens[2] == [4, EOT]
    result = g.result
    assert result is not None
    assert result.tokens == [2, 3] and result.token_logprobs == [-0.5, -0.5]  # -1.5 over 2 tokens
    assert result.sum_logprob == -1.5 and result.avg_logprob == -0.5  # end-of-text counts in the average


def test_a_candidate_cut_as_a_runaway_is_kept_only_when_every_candidate_was() -> None:
    """A row cut short (offline.cut_runaways: it loops and fails the window's
    compression check already) would fail the attempt for certain: a candidate that ended on its
    own is kept instead, although the cut one is the more likely per token."""
    g = group(DecodingOptions(temperature=0.5, best_of=3), 0.5)
    step(g, [1, 2, 4], [-0.1, -0.9, -0.5])
    g.cut_short([0])  # row 0 ends at its next token
    step(g, [1, 3, 4], [-0.1, -0.9, -0.5])
    step(g, [5, EOT, EOT], [-0.1, -0.9, -0.5])
    assert g.done and len(g.tokens[0]) == 2  # the cut row: two tokens at -0.1 each
    assert g.result is not None and g.result.tokens == [4, 4]  # -1.5 over 2 against row 0's -0.2

    every = group(DecodingOptions(temperature=0.5, best_of=2), 0.5)
    step(every, [1, 2], [-0.1, -0.9])
    every.cut_short([0, 1])
    step(every, [1, 2], [-0.1, -0.9])
    assert every.done and every.result is not None and every.result.tokens == [1, 1]  # the likelier of the cut


def test_best_of_only_widens_sampled_windows() -> None:
    options = DecodingOptions(beam_size=4, best_of=3)
    assert group(options, 0.0).num_rows == 4
    assert group(options, 0.2).num_rows == 3
    assert group(DecodingOptions(best_of=3), 0.0).num_rows == 1
