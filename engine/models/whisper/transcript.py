"""Turning decoded windows into segments, and advancing through long audio.

Long-form audio is transcribed as consecutive 30 s windows; each next window starts where
the predicted timestamps say the last complete segment ended (openai/whisper's `transcribe`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from engine.log_mel import FRAMES_PER_SECOND
from engine.models.whisper.features import ENCODER_STRIDE, SECONDS_PER_TOKEN
from engine.models.whisper.tokenizer import WhisperTokenizer
from engine.models.whisper.window import WindowResult

TEMPERATURE_LADDER = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
COMPRESSION_RATIO_THRESHOLD = 2.4  # above: repetitive output, retry hotter
LOGPROB_THRESHOLD = -1.0  # below: unconfident output, retry hotter
PROMPT_RESET_TEMPERATURE = 0.5  # windows decoded hotter than this do not prompt the next one


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


LOOP_KEEP_REPEATS = 3
"""A looping pass keeps this many of the phrase it repeats: speech says a word three times now and
then ("no, no, no"); a decoder loop writes it until its token budget runs out."""
LOOP_MAX_PHRASE_WORDS = 4


def loop_start(words: list[str], keep: int = LOOP_KEEP_REPEATS) -> int | None:
    """Index of the first word past `keep` back-to-back repeats of one phrase (1 to
    LOOP_MAX_PHRASE_WORDS words, compared without case and punctuation), the earliest such
    point over all phrase lengths; None when no phrase repeats more than `keep` times."""
    norm = ["".join(ch for ch in w.lower() if ch.isalnum()) for w in words]
    first: int | None = None
    for n in range(1, LOOP_MAX_PHRASE_WORDS + 1):
        for start in range(len(norm) - n * (keep + 1) + 1):
            phrase = norm[start : start + n]
            if not any(phrase):
                continue
            repeats = 1
            while norm[start + repeats * n : start + (repeats + 1) * n] == phrase:
                repeats += 1
            if repeats > keep:
                cut = start + keep * n
                first = cut if first is None else min(first, cut)
                break
    return first


RUNAWAY_MAX_PERIOD = 8
RUNAWAY_REPEATS = 6
RUNAWAY_MIN_TOKENS = 24


def runaway(text_tokens: list[int]) -> bool:
    """The text tokens end in one run of at most RUNAWAY_MAX_PERIOD tokens repeated back to back
    RUNAWAY_REPEATS times, over RUNAWAY_MIN_TOKENS tokens at least: "a a a a ...", "word word
    word ...", "Thank you. Thank you. ..." as a decoder writes them once it is stuck (speech
    repeats a word three times now and then, not two dozen)."""
    for period in range(1, RUNAWAY_MAX_PERIOD + 1):
        span = max(RUNAWAY_MIN_TOKENS, RUNAWAY_REPEATS * period)
        tail = text_tokens[-span:]
        if len(tail) == span and tail[period:] == tail[:-period]:
            return True
    return False


def temperature_ladder(start: float, fallback: bool) -> tuple[float, ...]:
    if not fallback:
        return (start,)
    if start == 0.0:
        return TEMPERATURE_LADDER
    return (start, *(t for t in TEMPERATURE_LADDER if t > start))


def needs_fallback(result: WindowResult, text: str, no_speech_threshold: float) -> bool:
    if result.no_speech_prob > no_speech_threshold and result.avg_logprob < LOGPROB_THRESHOLD:
        return False  # silence: accepted as such
    return compression_ratio(text) > COMPRESSION_RATIO_THRESHOLD or result.avg_logprob < LOGPROB_THRESHOLD


def is_silence(result: WindowResult, no_speech_threshold: float) -> bool:
    return result.no_speech_prob > no_speech_threshold and result.avg_logprob < LOGPROB_THRESHOLD


@dataclass
class RawSegment:
    start: float
    end: float
    tokens: list[int]


def split_segments(
    tokens: list[int], tokenizer: WhisperTokenizer, window_start: float, window_frames: int
) -> tuple[list[RawSegment], int]:
    """Split a window's tokens at timestamp pairs. Returns the segments (seconds from the start
    of the audio) and how many mel frames the window consumed (the seek advance)."""
    tb = tokenizer.timestamp_begin
    is_ts = [t >= tb for t in tokens]
    window_seconds = window_frames / FRAMES_PER_SECOND
    single_ending = len(is_ts) >= 2 and is_ts[-2:] == [False, True]
    consecutive = [i for i in range(1, len(is_ts)) if is_ts[i] and is_ts[i - 1]]
    segments: list[RawSegment] = []
    if consecutive:
        slices = list(consecutive)
        if single_ending:
            slices.append(len(tokens))
        last = 0
        for cut in slices:
            part = tokens[last:cut]
            start = (part[0] - tb) * SECONDS_PER_TOKEN
            end = (part[-1] - tb) * SECONDS_PER_TOKEN
            segments.append(RawSegment(window_start + start, window_start + end, part))
            last = cut
        if single_ending:
            advance = window_frames
        else:
            last_ts = tokens[last - 1] - tb
            advance = int(last_ts * ENCODER_STRIDE)
    else:
        stamps = [t for t in tokens if t >= tb]
        duration = window_seconds
        if stamps and stamps[-1] != tb:
            duration = (stamps[-1] - tb) * SECONDS_PER_TOKEN
        segments.append(RawSegment(window_start, window_start + duration, tokens))
        advance = window_frames
    return segments, max(advance, 1)
