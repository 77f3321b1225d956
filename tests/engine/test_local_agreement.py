"""LocalAgreement-2 (and -n) over scripted and random hypothesis sequences."""

from __future__ import annotations

import random

import pytest

from engine.streaming import LocalAgreement, join_words, normalize_word
from engine.types import Word


def hyp(text: str, start: float = 0.0, step: float = 0.5, prob: float = 0.9) -> list[Word]:
    """Whisper-style words (leading spaces), one every `step` seconds from `start`."""
    return [
        Word(word=" " + w, start=start + i * step, end=start + i * step + step * 0.8, confidence=prob)
        for i, w in enumerate(text.split())
    ]


def texts(words: list[Word]) -> list[str]:
    return [w.word for w in words]


def test_commits_the_common_prefix_in_the_newer_surface_form() -> None:
    agreement = LocalAgreement()
    first = agreement.insert(hyp("hello world this is"))
    assert first.committed == [] and agreement.committed_text == ""
    assert agreement.text == "hello world this is"

    second = agreement.insert(hyp("Hello, world! This was it"))
    assert texts(second.committed) == [" Hello,", " world!", " This"]
    assert agreement.committed_text == "Hello, world! This"
    assert agreement.tentative_text == " was it"
    assert agreement.text == "Hello, world! This was it"
    assert second.trim_to == pytest.approx(1.0 + 0.4)  # end of " This" (third word)

    # Offset words are reported in absolute time.
    third = agreement.insert(hyp("was it fine", start=0.0), offset=1.5)
    assert texts(third.committed) == [" was", " it"]
    assert third.committed[0].start == pytest.approx(1.5)
    assert agreement.committed_text == "Hello, world! This was it"
    assert texts(third.tentative) == [" fine"]


def test_three_pass_agreement_commits_only_what_three_passes_said() -> None:
    agreement = LocalAgreement(agreement=3)
    assert agreement.insert(hyp("the cat sat")).committed == []
    assert agreement.insert(hyp("the cat sat on")).committed == []  # two passes are not enough
    third = agreement.insert(hyp("the cat sit on the"))
    assert texts(third.committed) == [" the", " cat"]  # "sat" / "sit": the third pass disagrees
    assert texts(third.tentative) == [" sit", " on", " the"]
    # the older passes' tails are kept past the commit: "sit on" must now agree three times
    fourth = agreement.insert(hyp("cat sit on the mat", start=0.5))
    assert texts(fourth.committed) == []  # pass two said "sat"
    fifth = agreement.insert(hyp("cat sit on the mat", start=0.5))
    assert texts(fifth.committed) == [" sit", " on", " the"]
    assert agreement.committed_text == "the cat sit on the"
    assert agreement.finish().committed[0].word == " mat"


def test_words_near_the_audio_edge_commit_only_once_a_pass_hears_past_them() -> None:
    """Two passes cut just after "antecedents" end it with a period (the second heard a clipped
    "nor" as "No."); words agree without punctuation, so committing "antecedents." would put a
    sentence end into the middle of the speech."""
    agreement = LocalAgreement()
    agreement.insert(hyp("of my antecedents."), settled_until=0.5)
    held = agreement.insert(hyp("of my antecedents. No."), settled_until=1.0)  # "antecedents." ends at 1.4
    assert texts(held.committed) == [" of", " my"] and texts(held.tentative) == [" antecedents.", " No."]
    heard = agreement.insert(hyp("of my antecedents, nor of the"), settled_until=1.5)
    assert texts(heard.committed) == [" antecedents,"]
    assert agreement.committed_text == "of my antecedents,"
    edge = agreement.insert(hyp("of my antecedents, nor of the cir"), settled_until=2.5)
    assert texts(edge.committed) == [" nor", " of"], "' the' ends at 2.9, after the settled time: it waits"
    settled = LocalAgreement()  # an ending followed by audio is an ending
    settled.insert(hyp("the end."), settled_until=0.5)
    assert texts(settled.insert(hyp("the end."), settled_until=1.0).committed) == [" the", " end."]


def test_untrimmed_window_reemitting_committed_words() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("the quick brown fox"))
    agreement.insert(hyp("the quick brown fox jumps"))
    assert agreement.committed_text == "the quick brown fox"
    # The window was not trimmed: the next passes decode from 0 s again.
    update = agreement.insert(hyp("the quick brown fox jumps over"))
    assert texts(update.committed) == [" jumps"]
    agreement.insert(hyp("the quick brown fox jumps over the"))
    assert agreement.committed_text == "the quick brown fox jumps over"


def test_leaked_prompt_at_window_start_is_skipped() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("we choose to go"))
    agreement.insert(hyp("we choose to go to"))
    assert agreement.committed_text == "we choose to go"
    trim = agreement.committed_until
    # Window trimmed at the commit point; the model repeats the prompt's last words first.
    agreement.insert(hyp("to go to the moon", step=0.3), offset=trim)
    update = agreement.insert(hyp("to go to the moon in", step=0.3), offset=trim)
    assert agreement.committed_text == "we choose to go to the moon"
    assert texts(update.tentative) == [" in"]


def test_repeat_far_from_the_commit_point_is_kept() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("no"))
    agreement.insert(hyp("no"))
    assert agreement.committed_text == "no"
    # Another "no" said two seconds later is new speech, not a re-emission.
    agreement.insert(hyp("no", start=2.0))
    agreement.insert(hyp("no", start=2.0))
    assert agreement.committed_text == "no no"


def test_single_word_repeat_after_a_pause_is_kept() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("say no"))
    agreement.insert(hyp("say no"))
    assert agreement.committed_text == "say no"
    # "no" again 0.3 s after the committed "no" ended, in a window trimmed at the commit point.
    trim = agreement.committed_until
    agreement.insert(hyp("no thanks", start=0.3), offset=trim)
    agreement.insert(hyp("no thanks", start=0.3), offset=trim)
    assert agreement.committed_text == "say no no thanks"


def test_word_straddling_the_commit_point() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("one two three"))
    agreement.insert(hyp("one two three four"))
    until = agreement.committed_until  # end of "three" = 1.4
    # "three" re-emitted with a start jittered past the time filter: dropped by the word match.
    straddling = [Word(" three", until - 0.05, until + 0.1, 0.9), *hyp("four five", start=until + 0.2)]
    agreement.insert(straddling)
    assert agreement.committed_text == "one two three four"


def test_empty_hypothesis_commits_nothing_and_clears_the_tail() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("alpha beta"))
    update = agreement.insert([])
    assert update.committed == [] and update.tentative == [] and agreement.text == ""
    # Agreement restarts from the next pair.
    agreement.insert(hyp("alpha beta"))
    assert agreement.committed_text == ""
    agreement.insert(hyp("alpha beta gamma"))
    assert agreement.committed_text == "alpha beta"
    assert agreement.insert([Word("  ", 0.0, 0.1, 1.0)]).committed == []


def test_finish_commits_the_final_hypothesis() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("ask not what"))
    agreement.insert(hyp("ask not what your"))
    final = agreement.finish(hyp("ask not what your country can do"))
    assert texts(final.committed) == [" your", " country", " can", " do"]
    assert agreement.committed_text == "ask not what your country can do"
    assert agreement.tentative_text == "" and final.tentative == []
    assert final.trim_to == pytest.approx(3.0 + 0.4)


def test_finish_without_a_hypothesis_commits_the_tail() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("ask not"))
    agreement.insert(hyp("ask not what you"))
    assert texts(agreement.finish().committed) == [" what", " you"]
    assert agreement.committed_text == "ask not what you"
    assert agreement.finish().committed == []


def test_force_commit_before_a_time_and_take_committed() -> None:
    agreement = LocalAgreement()
    agreement.insert(hyp("one two"))
    agreement.insert(hyp("one two three four five"))  # words end at 0.4, 0.9, 1.4, 1.9, 2.4
    assert texts(agreement.take_committed()) == [" one", " two"]
    assert agreement.take_committed() == []
    # The window is at its cap: words ending by 1.9 s are committed without a second opinion.
    update = agreement.force_commit_before(1.9)
    assert texts(update.committed) == [" three", " four"] and texts(update.tentative) == [" five"]
    assert update.trim_to == pytest.approx(1.9)
    assert agreement.committed_text == "one two three four"
    assert texts(agreement.take_committed()) == [" three", " four"]
    assert agreement.force_commit_before(0.0).committed == []


def test_prompt_is_the_committed_tail_at_a_word_boundary() -> None:
    agreement = LocalAgreement(prompt_chars=30)
    words = hyp(" ".join(f"word{i}" for i in range(40)), step=0.2)
    agreement.insert(words)
    agreement.insert(words)
    prompt = agreement.prompt()
    assert len(prompt) <= 30 and agreement.committed_text.endswith(prompt)
    assert prompt.startswith("word") and prompt.split()[0] in agreement.committed_text.split()
    assert LocalAgreement().prompt() == ""


def test_text_joining() -> None:
    assert normalize_word(" Hello,") == normalize_word("hello") == "hello"
    assert normalize_word(" -") == "-"
    # Whisper words carry their spaces; bare words get one; CJK and punctuation do not.
    spaced = [Word(" Hello,", 0, 1, 1), Word(" world", 1, 2, 1)]
    bare = [Word("Hello,", 0, 1, 1), Word("world", 1, 2, 1), Word("!", 2, 2.1, 1), Word("'s", 2, 3, 1)]
    cjk = [Word("你好", 0, 1, 1), Word("世界", 1, 2, 1)]
    assert join_words(spaced) == "Hello, world"
    assert join_words(bare) == "Hello, world!'s"
    assert join_words(cjk) == "你好世界"
    assert join_words([Word(" (", 0, 1, 1), Word("aside)", 1, 2, 1)], "say") == "say (aside)"


def test_bad_offset_is_rejected() -> None:
    with pytest.raises(ValueError, match="offset"):
        LocalAgreement().insert(hyp("a"), offset=float("nan"))


def _noisy_hypothesis(rng: random.Random, truth: list[str], heard: int, counter: list[int]) -> list[str]:
    """What a decoder might say after hearing `heard` words: the truth with a garbled tail.

    The tail garbling is fresh every pass (a unique token), so two passes never agree on a
    wrong word, while words far behind the audio edge are right. Occasionally the pass is
    empty or drops the last word, like a real decoder unsure at the edge.
    """
    if rng.random() < 0.05:
        return []
    words = truth[:heard]
    wrong_from = max(0, heard - rng.randint(0, 3))
    garbled = []
    for word in words[wrong_from:]:
        counter[0] += 1
        garbled.append(f"x{counter[0]}" if rng.random() < 0.5 else word.upper())
    return words[:wrong_from] + garbled


@pytest.mark.parametrize(("seed", "passes"), [(s, 2) for s in range(20)] + [(s, 3) for s in range(5)])
def test_random_sequences_commit_only_agreed_prefixes(seed: int, passes: int) -> None:
    rng = random.Random(seed)
    # Distinct words: a repeated n-gram right at the commit point is indistinguishable from a
    # re-emission and is dropped by design (see the scripted repeat tests).
    truth = rng.sample([f"{a}{b}" for a in ("ka", "to", "ri", "mu", "se") for b in ("n", "m", "l", "p", "t", "k")], 30)
    agreement = LocalAgreement(agreement=passes)
    counter = [0]
    history: list[str] = []
    offset, heard, previous = 0.0, 0, [""]
    while heard < len(truth):
        heard = min(len(truth), heard + rng.randint(0, 3))
        # The runner trims the window at the commit point only now and then.
        if rng.random() < 0.3:
            offset = agreement.committed_until
        said = _noisy_hypothesis(rng, truth, heard, counter)
        # Times: word i of the truth spans [0.5 i, 0.5 i + 0.4], whichever form it is said in.
        words = [Word(" " + w, 0.5 * i - offset, 0.5 * i + 0.4 - offset, 0.9) for i, w in enumerate(said)]
        update = agreement.insert(words, offset=offset)
        history.append(agreement.committed_text)
        # Every newly committed word appeared, in agreement, in the previous pass too.
        previous_keys = {normalize_word(w) for w in previous}
        assert all(normalize_word(w.word) in previous_keys for w in update.committed)
        assert agreement.text.startswith(agreement.committed_text)
        previous = said
    agreement.finish([Word(" " + w, 0.5 * i - offset, 0.5 * i + 0.4 - offset, 0.9) for i, w in enumerate(truth)],
                       offset=offset)
    history.append(agreement.committed_text)

    # Committed text never changes: each is a prefix of every later one ...
    for i, earlier in enumerate(history):
        assert all(later.startswith(earlier) for later in history[i + 1 :])
    # ... and since two passes never agree on a garbled word, it is the truth, word for word.
    committed = agreement.committed_text.split()
    assert [normalize_word(w) for w in committed] == truth


def test_agreed_words_at_the_end_of_a_pass_wait_for_the_next_one() -> None:
    """Two passes both say "whatsoever." (1.0-1.4 s) at their audio's end: it stays tentative
    (the speaker may go on: "whatsoever here."), and commits, in the form of the pass that heard
    past it, once there is one."""
    agreement = LocalAgreement()
    agreement.insert(hyp("no speech whatsoever."), settled_until=1.2)
    second = agreement.insert(hyp("no speech whatsoever."), settled_until=1.2)
    assert texts(second.committed) == [" no", " speech"] and texts(second.tentative) == [" whatsoever."]
    third = agreement.insert(hyp("no speech whatsoever here."), settled_until=2.2)
    assert texts(third.committed) == [" whatsoever"] and texts(third.tentative) == [" here."]
    assert agreement.committed_text == "no speech whatsoever"
