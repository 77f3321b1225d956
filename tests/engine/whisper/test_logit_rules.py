"""Whisper's logit rules applied to a whole decoder step at once (decoding.ruled_log_softmax).

The batch applies them to every row in one call; these check the timestamp grammar on small
synthetic vocabularies and that a row's result does not depend on the rows beside it.
"""

from __future__ import annotations

import math

import pytest
import torch

from engine.models.whisper.decoding import TokenRules, ruled_log_softmax

EOT, NO_TS, TB, V = 10, 12, 13, 40  # text 0..9, eot 10, sot 11, no-timestamps 12, timestamps 13..39


def rules(max_initial: int = 5) -> TokenRules:
    suppress = torch.zeros(V, dtype=torch.bool)
    suppress[11] = True  # sot is never generated
    begin = torch.zeros(V, dtype=torch.bool)
    begin[[0, EOT]] = True  # blank and eot never come first
    return TokenRules(eot=EOT, timestamp_begin=TB, no_timestamps=NO_TS, n_vocab=V, suppress=suppress,
                      suppress_begin=begin, max_initial_timestamp_index=max_initial)


def apply_rules(rules: TokenRules, logits: torch.Tensor, seqs: list[list[int]], timestamps: list[bool]) -> torch.Tensor:
    """The ruled logits of one step (what these tests check; the log-softmax is the batch's)."""
    return ruled_log_softmax(rules, logits, seqs, timestamps)[0]


def allowed(row: torch.Tensor) -> set[int]:
    return {i for i, x in enumerate(row.tolist()) if x != -math.inf}


def test_the_first_token_is_an_early_timestamp() -> None:
    out = apply_rules(rules(), torch.zeros(1, V), [[]], [True])
    assert allowed(out[0]) == set(range(TB, TB + 6))


def test_without_timestamps_only_suppression_applies() -> None:
    out = apply_rules(rules(), torch.zeros(2, V), [[], [1, 2]], [False, False])
    assert allowed(out[0]) == set(range(V)) - {0, 11, EOT}
    assert allowed(out[1]) == set(range(V)) - {11}


def test_timestamps_come_in_pairs_and_never_go_back() -> None:
    text_heavy = torch.zeros(1, V)
    text_heavy[0, :TB] = 5.0  # text outweighs timestamps: no forced timestamp
    # after <|t3|> text <|t7|>: the pair closes, so text (or eot) must follow... unless <|t7|> opens
    # the next segment, which the grammar allows as the repeat of the closing stamp
    closing = apply_rules(rules(), text_heavy, [[TB + 3, 1, TB + 7]], [True])
    assert allowed(closing[0]) == set(range(TB + 7, V)) | {EOT}
    # after two timestamps in a row: text only
    pair = apply_rules(rules(), text_heavy, [[TB + 3, 1, TB + 7, TB + 7]], [True])
    assert allowed(pair[0]) == set(range(0, EOT + 1)) - {11}
    # inside a segment: text, or a timestamp later than the opening one
    inside = apply_rules(rules(), text_heavy, [[TB + 3, 1]], [True])
    assert allowed(inside[0]) == (set(range(0, EOT + 1)) | set(range(TB + 4, V))) - {11}


def test_timestamps_are_forced_when_they_outweigh_any_text_token() -> None:
    logits = torch.zeros(1, V)
    logits[0, TB:] = 3.0
    out = apply_rules(rules(), logits, [[TB + 1, 1]], [True])
    assert allowed(out[0]) == set(range(TB + 2, V))


def test_a_row_is_ruled_the_same_alone_and_in_a_batch() -> None:
    torch.manual_seed(0)
    seqs = [[], [TB + 2, 4], [TB + 2, 4, TB + 9], [TB + 2, 4, TB + 9, TB + 9, 7], [5, 6], []]
    flags = [True, True, True, True, False, False]
    logits = torch.randn(len(seqs), V) * 3
    together = apply_rules(rules(), logits, seqs, flags)
    for i, (seq, flag) in enumerate(zip(seqs, flags)):
        alone = apply_rules(rules(), logits[i : i + 1], [seq], [flag])
        assert torch.equal(alone[0], together[i]), i
    assert not torch.equal(together, logits)  # the input is not ruled in place


def test_a_loop_is_cut_after_three_repeats_of_its_phrase_and_speech_is_kept() -> None:
    """A live pass that loops (no temperature fallback there) keeps what precedes the loop: seen
    on the int8 path, tiny.en wrote "word" forty times over a clip that says it five times."""
    from engine.models.whisper.transcript import loop_start

    said = ["Word.", "Another", "word.", "Here's", "some", "more", "word.", "Word.", "Word."]
    assert loop_start(said) is None  # speech repeating itself a few times is speech
    looped = [*said, *["word"] * 40]
    assert looped[: loop_start(looped)] == said  # "word. Word. Word." and no more: the loop cut
    assert loop_start(["a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "c", "d"]) == 9  # a phrase loops too
    assert loop_start(["no", "no", "no"]) is None


def test_a_row_whose_speech_goes_on_does_not_end_before_its_floor() -> None:
    """A long recording's window (speech until its end) does not end on a timestamp pair below
    the row's end-of-text floor (decoding.speech_eot_floor: that end would leave the rest of the
    window to be decoded again); a row beside it without a floor, and a pair at the floor, may."""
    text_heavy = torch.zeros(3, V)
    text_heavy[:, :TB] = 5.0
    seqs = [[TB + 3, 1, TB + 7, TB + 7], [TB + 3, 1, TB + 7, TB + 7], [TB + 3, 1, TB + 20, TB + 20]]
    out = ruled_log_softmax(rules(), text_heavy, seqs, [True, True, True], [TB + 15, None, TB + 15])[0]
    assert allowed(out[0]) == set(range(0, EOT)) - {11}, "the floor holds: text only"
    assert allowed(out[1]) == set(range(0, EOT + 1)) - {11}, "no floor: text or end"
    assert allowed(out[2]) == set(range(0, EOT + 1)) - {11}, "past the floor: text or end"
    # an end after text, or after a single closing timestamp, takes the whole window: not held
    inside = ruled_log_softmax(rules(), text_heavy[:1], [[TB + 3, 1]], [True], [TB + 15])[0]
    assert EOT in allowed(inside[0])
    closing = ruled_log_softmax(rules(), text_heavy[:1], [[TB + 3, 1, TB + 7]], [True], [TB + 15])[0]
    assert allowed(closing[0]) == set(range(TB + 7, V)) | {EOT}


def test_the_floor_is_a_margin_before_the_speech_ends() -> None:
    from engine.models.whisper.decoding import EOT_HOLD_MARGIN_S, speech_eot_floor
    from engine.models.whisper.features import SECONDS_PER_TOKEN

    assert speech_eot_floor(None, TB) is None
    assert speech_eot_floor(EOT_HOLD_MARGIN_S, TB) is None, "too little speech to hold anything"
    floor = speech_eot_floor(10.0, TB)
    assert floor is not None and (floor - TB) * SECONDS_PER_TOKEN == pytest.approx(10.0 - EOT_HOLD_MARGIN_S, abs=SECONDS_PER_TOKEN)
