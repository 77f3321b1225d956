"""Sampled decoding draws one token per row by inverting the cumulative sum of the tempered,
filtered distribution: draws follow it, never pick a token of probability 0, and repeat with the
seed. No model: a small vocabulary of hand-set logits."""

from __future__ import annotations

import pytest
import torch

from engine.models.whisper.decoding import DecodeGroup, TokenRules
from engine.types import DecodingOptions

VOCAB = 8
RULES = TokenRules(eot=7, timestamp_begin=8, no_timestamps=6, n_vocab=VOCAB,
                   suppress=torch.zeros(VOCAB, dtype=torch.bool), suppress_begin=torch.zeros(VOCAB, dtype=torch.bool))


def _group(seed: int, **options: object) -> DecodeGroup:
    generator = torch.Generator().manual_seed(seed)
    return DecodeGroup(None, [0], 0, DecodingOptions(best_of=4, **options), 1.0, RULES,  # type: ignore[arg-type]
                       False, 10, generator)


def _frequencies(group: DecodeGroup, logits: torch.Tensor, rounds: int) -> torch.Tensor:
    draws = torch.cat([group._sample(logits) for _ in range(rounds)])
    return torch.bincount(draws, minlength=VOCAB).double() / draws.numel()


LOGITS = torch.tensor([[2.0, 1.0, 0.5, float("-inf"), 0.0, -1.0, float("-inf"), 1.5]]).repeat(4, 1)


def test_draws_follow_the_distribution_and_skip_suppressed_tokens() -> None:
    freq = _frequencies(_group(0), LOGITS, 5000)
    expected = torch.softmax(LOGITS[0].double(), dim=-1)
    assert freq[3] == 0 and freq[6] == 0
    torch.testing.assert_close(freq, expected, atol=0.01, rtol=0)


@pytest.mark.parametrize(("options", "allowed"), [({"top_k": 2}, {0, 7}), ({"top_p": 0.5}, {0, 7})])
def test_top_k_and_top_p_keep_only_the_most_likely_tokens(options: dict[str, object], allowed: set[int]) -> None:
    freq = _frequencies(_group(1, **options), LOGITS, 2000)
    assert {int(i) for i in freq.nonzero()} == allowed


def test_the_same_seed_draws_the_same_tokens_and_an_all_suppressed_row_is_refused() -> None:
    assert torch.equal(_group(5)._sample(LOGITS), _group(5)._sample(LOGITS))
    with pytest.raises(ValueError, match="suppressed"):
        _group(5)._sample(torch.full((1, VOCAB), float("-inf")))
