"""Where a live Whisper window is cut once words commit (streaming.py): the audio before the cut
leaves the window, so later passes encode less, while the committed words kept after it are
forced on the next pass as its lead-in.

    cut_after_commits(inside, new, window_s)       -> a cut once new words commit, or None
    cut_in_pause(inside, reheard, heard_until)     -> a cut in a pause after the last word, or None

`inside`: the committed words the window still holds, in order. Pure functions of the words'
aligned times and text; the stream applies the cut (`StreamWindow._trim_to`, stream_window.py).
"""

from __future__ import annotations

from itertools import pairwise

from engine.types import Word

TRIM_AFTER_S = 4.0  # a window without a committed sentence end is trimmed in a pause after a committed word
MIN_PAUSE_S = 0.2  # gap between two aligned words that counts as a pause (a cut there splits no word)
PAUSE_MARKS = (".", "?", "!", ",", ";", ":")
NO_PAUSE_TRIM_AFTER_S = 12.0  # ...and with no such pause, at the last committed word, once this long
TRIM_KEEP_S = 1.0  # ...keeping this much audio before it, so the next pass hears whole words
SENTENCE_END = (".", "?", "!")
LEFT_CONTEXT_S = 1.0
"""Audio (s) a window keeps before the end of its last committed sentence once that sentence is
committed: the whole committed words in it are forced, so the next sentence's first word is
decoded after a lead-in, and the rest of the sentence is dropped from the encoder's work."""
PAUSE_HEARD_S = 1.0  # silence a pass heard after a committed, punctuated last word: a pause in speech
PAUSE_CUT_SLACK_S = 0.1  # ...the window is then cut before that word, at most this far past the word before


def cut_after_commits(inside: list[Word], new: list[Word], window_s: float) -> float | None:
    """Where to cut a window of `window_s` seconds after `new` words committed (`inside` holds
    them already): in a pause after a committed word, once a sentence end is committed (Whisper
    keeps its in-sentence context) or the window is longer than TRIM_AFTER_S; with no such
    pause, TRIM_KEEP_S before the last new word once the window is longer than
    NO_PAUSE_TRIM_AFTER_S. A cut at a word's aligned end often lands inside the next word, and
    tiny.en, hearing half a word after a prompt, makes one up or skips ahead."""
    if not new:
        return None
    if window_s <= TRIM_AFTER_S and not any(w.word.rstrip().endswith(SENTENCE_END) for w in new):
        return None
    cuts = [t for t in (last_pause(inside), after_sentence_end(inside)) if t is not None]
    if cuts:
        return max(cuts)
    if window_s > NO_PAUSE_TRIM_AFTER_S:
        return new[-1].start - TRIM_KEEP_S
    return None


def last_pause(inside: list[Word]) -> float | None:
    """Middle of the latest pause between two committed words: Whisper wrote punctuation there
    and the aligned words leave a gap (a gap alone is often alignment jitter inside a long
    word). The word after it is committed, so the next pass is forced with it: a window that
    starts at an uncommitted word's onset, after a prompt ending a sentence, is decoded
    without a lead-in, and tiny.en writes "No, or of the circumstances" for "nor of the ..."."""
    for before, after in reversed(list(pairwise(inside))):
        if marks_pause(before) and after.start - before.end >= MIN_PAUSE_S:
            return (before.end + after.start) / 2
    return None


def after_sentence_end(inside: list[Word]) -> float | None:
    """Where the window may start once a sentence end is committed: at the start of the latest
    committed word that starts LEFT_CONTEXT_S or more before that sentence's end, so the
    window keeps whole committed words (forced on the next pass) as the lead-in of what
    follows. Without it the window kept the whole sentence until the next one's first word
    committed after a gap in the aligned times (which abutting words often lack), and every
    pass re-encoded it. The cut stays before the sentence's last word: a last word in a
    window of mostly silence is aligned up to seconds late, and a forced word the window
    no longer holds suppresses the next ones. None: no committed sentence end in the window,
    or too little before it to cut."""
    ends = [i for i, w in enumerate(inside) if w.word.rstrip().endswith(SENTENCE_END)]
    if not ends:
        return None
    last = ends[-1]
    keep_from = inside[last].end - LEFT_CONTEXT_S
    starts = [i for i in range(1, last) if inside[i].start <= keep_from]
    if not starts:
        return None
    first = starts[-1]
    return max(inside[first].start, inside[first - 1].end)


def cut_in_pause(inside: list[Word], reheard: list[Word], heard_until: float) -> float | None:
    """The speaker paused after a punctuated committed word: a pass wrote nothing new
    (`reheard`: its words, all committed before), nor did the one before, and the stream heard
    PAUSE_HEARD_S of silence after that word (`heard_until`: the end of its audio so far). The
    window, which would keep the whole sentence until the next word commits (`last_pause`
    needs a committed word on both sides), is cut TRIM_KEEP_S before that word's start: the
    words kept are forced, so a pass over the silence ends at once (a window of only silence
    after a prompt makes tiny.en write "Yeah." or loop), and the next word has a lead-in. The
    cut never passes the end of the word before: a lone word in a window of mostly silence is
    aligned up to seconds late, and a forced word the window no longer holds suppresses the
    next ones."""
    if len(inside) < 2:
        return None
    before, last = inside[-2:]
    end = max([last.end, *(w.end for w in reheard)])
    if marks_pause(last) and heard_until - end >= PAUSE_HEARD_S:
        return min(last.start - TRIM_KEEP_S, before.end + PAUSE_CUT_SLACK_S)
    return None


def marks_pause(word: Word) -> bool:
    """The word ends in punctuation Whisper writes where the speaker pauses."""
    return word.word.rstrip()[-1:] in PAUSE_MARKS


__all__ = ["LEFT_CONTEXT_S", "MIN_PAUSE_S", "NO_PAUSE_TRIM_AFTER_S", "PAUSE_CUT_SLACK_S", "PAUSE_HEARD_S", "PAUSE_MARKS",
           "SENTENCE_END", "TRIM_AFTER_S", "TRIM_KEEP_S", "after_sentence_end", "cut_after_commits", "cut_in_pause",
           "last_pause", "marks_pause"]
