"""Live loss mechanisms (issue 34), each pinned by the smallest case that lost speech.

- A pass forced with the committed words still in its window (streaming.py) knows, by count,
  which of its words are new. The agreement used to filter them again by time: every word whose
  middle lay before the end of the last committed word was taken as heard already. A lone word
  in a window of mostly silence is aligned up to seconds late ("No." at 9.46 s, then 11.5 s,
  then 12.62 s over three passes), so the utterance after it fell "before" it, pass after pass,
  and was never committed: lost. It failed before `known_new`: "Firefox" never committed.
- The same filter's single-word rule dropped a word said twice in a row ("five five") whenever
  the second started within 0.1 s of the first's aligned end.
- A final pass that ends its text early (tiny.en's end-of-text after the first sentence of a
  window holding two, 5 s apart) was the stream's last word: the second sentence was lost.
  The final pass is now followed by one more over the audio after the last committed word when
  the VAD hears speech there. Failed before: the final was the first sentence alone.
- A lone word between two long pauses ("Firefox ... six ... I have a thousand thoughts", fed in
  half-second blocks, each block's passes run, as a server that keeps up runs them): passes
  forced with "Firefox" wrote only "." over "six", and once 5 s of the window followed the last
  committed word with no speech in the last second, a skipped pass cut the window to its last
  second, "six" with it. The cut now stops where the words end when the VAD hears uncovered
  speech after them, and the next pass decodes it. Failed before: the final had no "six".

The two streams are run on both numeric paths (float32 and int8). Without coverage each loses
speech on both, though not the same words (float32 loses "six"; int8 also the closing words),
so the without-coverage variants assert that something is lost, the coverage ones that nothing is.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.streaming import LocalAgreement
from engine.types import Word
from tests.conftest import NUMERIC_PATHS, Clip


def word(text: str, start: float, end: float) -> Word:
    return Word(word=" " + text, start=start, end=end, confidence=0.9)


def test_words_after_a_late_aligned_committed_word_are_committed() -> None:
    agreement = LocalAgreement()
    said = [word("on", 8.0, 8.2), word("the", 8.2, 8.4), word("left.", 8.4, 8.9), word("No.", 11.2, 12.6)]
    agreement.insert(said)
    agreement.insert(said)
    assert agreement.committed_text.endswith("left. No.")
    # the next passes, forced with the committed words, hear "Firefox" at its true time
    after = [word("Firefox.", 11.0, 11.6)]
    agreement.insert(after, known_new=True)
    agreement.insert(after, known_new=True)
    assert agreement.committed_text.endswith("No. Firefox."), agreement.text
    # without the forced count, the time filter still guards unforced passes
    unforced = LocalAgreement()
    unforced.insert(said)
    unforced.insert(said)
    unforced.insert(after)
    assert unforced.text.endswith("No."), unforced.text


def test_a_word_said_again_right_after_itself_is_kept_after_a_forced_pass() -> None:
    agreement = LocalAgreement()
    first = [word("five", 0.5, 1.0)]
    agreement.insert(first)
    agreement.insert(first)
    second = [word("five", 1.05, 1.5)]
    agreement.finish(second, known_new=True)
    assert agreement.committed_text == "five five", agreement.committed_text


def test_a_repeated_phrase_after_a_forced_pass_is_still_dropped() -> None:
    agreement = LocalAgreement()
    said = [word("the", 1.0, 1.2), word("wizard", 1.2, 1.7)]
    agreement.insert(said)
    agreement.insert(said)
    agreement.finish([word("the", 1.6, 1.8), word("wizard", 1.8, 2.2), word("left", 2.5, 2.9)], known_new=True)
    assert agreement.committed_text == "the wizard left", agreement.committed_text


def _spoken(text: str) -> list[str]:
    return "".join(ch for ch in text.lower() if ch.isalnum() or ch.isspace()).split()


@pytest.mark.parametrize("quantization", NUMERIC_PATHS)
@pytest.mark.parametrize("coverage", [True, False], ids=["coverage", "without"])
def test_a_final_pass_that_ends_early_is_followed_by_one_over_the_rest(clips: list[Clip], coverage: bool,
                                                                       quantization: str) -> None:
    from engine import ASREngine, EngineConfig

    by_id = {c.id: c for c in clips}
    audio = np.concatenate([by_id["libri_61-70968-0000"].audio, np.zeros(5 * 16000, np.float32),
                            by_id["mfa_thoughts"].audio])
    engine = ASREngine(EngineConfig(service_mode="streaming", quantization=quantization,
                                    family_options={"whisper": {"speech_coverage": coverage}}))
    try:
        final = engine.transcribe_outputs(audio, streaming=True)[0]
    finally:
        engine.shutdown()
    spoken = " ".join(_spoken(final.text))
    assert spoken.startswith("he began") and "left" in spoken, final.text
    # the stream's audio is released one step per engine step, so its passes hear the whole
    # recording at once, as a loaded server's do: without coverage the second sentence is lost
    assert spoken.endswith("thoughts about that thing") == coverage, final.text


@pytest.mark.parametrize("quantization", NUMERIC_PATHS)
@pytest.mark.parametrize("coverage", [True, False], ids=["coverage", "without"])
def test_a_lone_word_between_long_pauses_survives_a_silence_trim(clips: list[Clip], coverage: bool,
                                                                  quantization: str) -> None:
    from engine import ASREngine, EngineConfig

    by_id = {c.id: c for c in clips}
    pause = np.zeros(3 * 16000, np.float32)
    audio = np.concatenate([by_id["cv_en_22058266"].audio, pause, by_id["cv_en_22058267"].audio, pause,
                            by_id["mfa_thoughts"].audio])
    engine = ASREngine(EngineConfig(service_mode="streaming", quantization=quantization,
                                    family_options={"whisper": {"speech_coverage": coverage}}))
    try:
        rid, block, final = engine.add_streaming_request(), 8000, None
        for start in range(0, audio.size, block):
            engine.feed_chunk(rid, audio[start : start + block], is_last=start + block >= audio.size)
            while engine.has_work():
                final = next((o for o in engine.step() if o.finished), final)
    finally:
        engine.shutdown()
    assert final is not None
    spoken = _spoken(final.text)
    assert "firefox" in spoken, final.text
    whole = spoken[-3:] == ["about", "that", "thing"] and bool({"six", "6"} & set(spoken))
    if coverage:
        assert whole, final.text
    elif quantization == "none":
        # the control: without coverage the float32 path loses "six" or the closing words here;
        # the int8 path's own rounding (float16 cross K/V) happens to keep them on this audio
        assert not whole, final.text
