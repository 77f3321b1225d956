"""What a live Whisper pass starts from besides its audio (streaming.py): the prompt, the committed
words before its window; the forced words, the committed ones the window still holds (and, on a
final pass, the settled tentative ones), which the decoder reads before it writes what follows;
and the draft, what the last pass decoded after the same forced tokens.

    committed_in_window(committed, window_start, window_s)   -> the committed words a pass is forced with
    prompt_words(committed, window_start)                     -> the committed words its prompt is made of
    settled_tentative(tentative, heard_until)                 -> what a final pass is forced with too
    word_count(tokenizer, words)                              -> how many words a pass reads there
    pass_draft(tokenizer, last_tokens, last_start, forced, window_start) -> the draft

Pure functions of the stream's words and tokens; the stream builds the pass from them
(`StreamingTranscription.make_job`). The committed words are scanned from the end, so a pass's
work does not grow with the session's transcript.
"""

from __future__ import annotations

from itertools import takewhile
from typing import TYPE_CHECKING

from engine.streaming.local_agreement import join_words
from engine.types import Word

if TYPE_CHECKING:
    from engine.models.whisper.tokenizer import WhisperTokenizer

PROMPT_CHARS = 200  # committed text carried as the prompt of the next pass
UNSETTLED_TAIL_S = 1.0  # the last words of a pass, this close to its audio's end, are not forced on the final


def committed_in_window(committed: list[Word], window_start: float, window_s: float) -> list[Word]:
    """Committed words whose audio the window (starting at `window_start`, at most `window_s`
    long) still holds: it is cut in pauses after them. Aligned ends are not in order (a lone
    word is aligned up to seconds late), so the search goes back until a word ends a whole
    window before the window's start."""
    inside: list[Word] = []
    for w in reversed(committed):
        if w.end > window_start + 1e-3:
            inside.append(w)
        elif w.end <= window_start - window_s:
            break
    return inside[::-1]


def prompt_words(committed: list[Word], window_start: float) -> list[Word]:
    """The committed words before the window, back to PROMPT_CHARS of text (the prompt's budget)."""
    words: list[Word] = []
    chars = 0
    for w in reversed(committed):
        if w.end <= window_start + 1e-3:
            words.append(w)
            chars += len(w.word)
            if chars >= PROMPT_CHARS:
                break
    return words[::-1]


def settled_tentative(tentative: list[Word], heard_until: float) -> list[Word]:
    """The tentative words a final pass is forced with: those before the last UNSETTLED_TAIL_S of
    the audio the last pass had (`heard_until`, stream seconds). The last words of a pass are
    often cut at its edge ("pain." for "painful")."""
    settled = heard_until - UNSETTLED_TAIL_S
    return list(takewhile(lambda w: w.end <= settled, tentative))


def word_count(tokenizer: WhisperTokenizer, words: list[Word]) -> int:
    """How many words `words` make once joined and tokenized again (as a pass reads them)."""
    text = join_words(words).strip()
    return len(tokenizer.split_to_word_tokens(tokenizer.encode(" " + text))[0]) if text else 0


def pass_draft(tokenizer: WhisperTokenizer, last_tokens: list[int] | None, last_start: float, forced: list[int],
               window_start: float) -> list[int]:
    """What a pass will likely decode after `forced`: what the last pass decoded after the same
    tokens (`last_tokens`, its window starting at `last_start`); consecutive passes hear mostly
    the same audio (measured at 16 lockstep sessions, half of the tokens passes decode are the
    last pass's). Without forced words a pass decodes with timestamps, and a draft without them,
    or with timestamps counted from where the window started before a trim, would fail at its
    first token."""
    if last_tokens is None or last_tokens[: len(forced)] != forced:
        return []
    rest = last_tokens[len(forced) :]
    if forced:
        rest = [t for t in rest if t < tokenizer.eot]
    elif window_start != last_start or not any(t >= tokenizer.timestamp_begin for t in rest):
        return []  # timestamps from another window start would fail at once
    return [*rest, tokenizer.eot]
