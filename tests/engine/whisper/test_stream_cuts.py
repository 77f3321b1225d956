"""Where a live window is cut once words commit (engine/models/whisper/stream_cuts.py): pure
functions of aligned words, checked on hand-timed words (no model)."""

from __future__ import annotations

from engine.models.whisper.stream_cuts import (
    LEFT_CONTEXT_S,
    MIN_PAUSE_S,
    NO_PAUSE_TRIM_AFTER_S,
    PAUSE_CUT_SLACK_S,
    PAUSE_HEARD_S,
    TRIM_AFTER_S,
    TRIM_KEEP_S,
    after_sentence_end,
    cut_after_commits,
    cut_in_pause,
    last_pause,
)
from engine.types import Word


def words(*spec: tuple[str, float, float]) -> list[Word]:
    return [Word(text, start, end, 1.0) for text, start, end in spec]


def test_a_short_window_is_not_cut_before_a_sentence_end_commits() -> None:
    inside = words((" Well,", 0.0, 0.4), (" then", 0.8, 1.1))
    assert cut_after_commits(inside, inside[1:], TRIM_AFTER_S) is None


def test_a_long_window_is_cut_in_the_middle_of_the_latest_punctuated_pause() -> None:
    inside = words((" Well,", 0.0, 0.4), (" then", 0.8, 1.1), (" yes;", 1.2, 1.5), (" no", 2.0, 2.3))
    assert last_pause(inside) == (1.5 + 2.0) / 2
    assert cut_after_commits(inside, inside[-1:], TRIM_AFTER_S + 0.1) == (1.5 + 2.0) / 2


def test_a_gap_without_punctuation_or_shorter_than_a_pause_is_no_cut() -> None:
    assert last_pause(words((" well", 0.0, 0.4), (" then", 1.4, 1.6))) is None
    assert last_pause(words((" well,", 0.0, 0.4), (" then", 0.4 + MIN_PAUSE_S / 2, 1.0))) is None


def test_a_committed_sentence_end_keeps_whole_words_of_left_context() -> None:
    inside = words((" It", 0.0, 0.2), (" was", 0.25, 0.5), (" a", 0.55, 0.6), (" dark", 0.65, 1.0),
                   (" night.", 1.05, 1.6))
    # the latest word starting LEFT_CONTEXT_S before the sentence's end is " a" (0.55 <= 0.6)
    assert after_sentence_end(inside) == max(0.55, 0.5)
    assert inside[-1].end - LEFT_CONTEXT_S >= 0.55
    # the cut is taken even in a short window: a sentence end committed
    assert cut_after_commits(inside, inside[-1:], 1.6) == 0.55


def test_a_long_window_without_any_pause_keeps_a_lead_in_before_the_last_new_word() -> None:
    inside = words((" and", 10.0, 10.2), (" so", 10.2, 10.5))
    assert cut_after_commits(inside, inside[-1:], NO_PAUSE_TRIM_AFTER_S + 0.5) == 10.2 - TRIM_KEEP_S
    assert cut_after_commits(inside, inside[-1:], NO_PAUSE_TRIM_AFTER_S) is None


def test_nothing_new_committed_is_no_cut() -> None:
    inside = words((" Yes.", 0.0, 0.5), (" No.", 1.0, 1.5))
    assert cut_after_commits(inside, [], NO_PAUSE_TRIM_AFTER_S + 1) is None


def test_a_pause_heard_after_a_punctuated_last_word_cuts_before_it_but_not_past_the_word_before() -> None:
    inside = words((" said", 3.0, 3.3), (" Alice.", 3.4, 4.0))
    assert cut_in_pause(inside, [], 4.0 + PAUSE_HEARD_S - 0.01) is None
    assert cut_in_pause(inside, [], 4.0 + PAUSE_HEARD_S) == min(3.4 - TRIM_KEEP_S, 3.3 + PAUSE_CUT_SLACK_S)
    # a re-heard word aligned later moves the pause's start
    assert cut_in_pause(inside, words((" Alice.", 3.5, 4.5)), 4.0 + PAUSE_HEARD_S) is None
    # no punctuation: no pause marked; one word: nothing to keep before it
    assert cut_in_pause(words((" said", 3.0, 3.3), (" Alice", 3.4, 4.0)), [], 9.0) is None
    assert cut_in_pause(inside[1:], [], 9.0) is None
