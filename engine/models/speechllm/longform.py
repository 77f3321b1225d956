"""Audio longer than the speech-LLM's one 30 s window: cut at silences, decode the pieces, stitch.

The audio encoder hears one Whisper window, so a longer request is cut into segments of at most
one window where the VAD hears silence (a run of speech longer than the window is cut at its least
speech-like 32 ms, `engine.vad.speech_segments`); audio the VAD hears no speech in is not decoded,
so nothing is written over silence. Each segment decodes as its own row(s) of the runner's batch,
several at once; the request's text is the segments' texts in order. Per-segment n-best lists do
not combine into alternatives of the whole, so `n_best > 1` is served for one window only (a 400
that says so, raised when the request is added).
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass, field

import numpy as np

from engine.errors import UnsupportedError
from engine.types import DecodingOptions, FinishReason, RequestOutput, Segment
from engine.vad import SAMPLE_RATE, VoiceActivityModel, speech_segments

WINDOW_SECONDS = 30.0
"""What one request's encoder hears (the Whisper front end's N_SAMPLES / SAMPLE_RATE)."""


def check_long_options(seconds: float, options: DecodingOptions) -> None:
    """Refuse what a request longer than one window cannot be served with (UnsupportedError: 400)."""
    if seconds > WINDOW_SECONDS and options.n_best > 1:
        raise UnsupportedError(
            f"n_best > 1 is served for audio up to {WINDOW_SECONDS:g} s: {seconds:.1f} s is decoded in segments cut "
            "at silences, whose alternatives do not combine into alternatives of the whole; ask n_best=1 or split "
            "the audio")


def plan_segments(audio: np.ndarray, vad: VoiceActivityModel) -> list[tuple[int, int]]:
    """Sample ranges [start, end) of the speech to decode, each at most one window, in order."""
    spans = speech_segments(audio, SAMPLE_RATE, model=vad, max_segment_s=WINDOW_SECONDS)
    limit = int(WINDOW_SECONDS * SAMPLE_RATE)
    out = []
    for start_s, end_s in spans:
        start, end = round(start_s * SAMPLE_RATE), min(round(end_s * SAMPLE_RATE), audio.shape[0])
        out.append((start, min(end, start + limit)))  # rounding never pushes a segment past the window
    return out


@dataclass
class SegmentText:
    """One decoded segment's transcript."""

    text: str
    tokens: list[int]
    logprobs: list[float]
    language: str | None
    reason: FinishReason


@dataclass(eq=False)
class LongRequest:
    """A request over one window: its segments, which are decoding, and what they said."""

    spans: list[tuple[int, int]]
    results: list[SegmentText | None] = field(default_factory=list)
    started: int = 0
    """Segments handed to the batch so far (they start in order)."""
    reported: int = 0
    """Leading segments whose text a partial has already reported."""

    def __post_init__(self) -> None:
        self.results = [None] * len(self.spans)

    @property
    def pending(self) -> bool:
        return self.started < len(self.spans)

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.results)

    def leading(self) -> list[SegmentText]:
        """The finished segments before the first unfinished one."""
        out = []
        for r in self.results:
            if r is None:
                break
            out.append(r)
        return out


def join_texts(texts: list[str]) -> str:
    """Segment texts as one transcript: a space between two, none beside a CJK character (those
    scripts write no spaces)."""
    out = ""
    for text in (t.strip() for t in texts):
        if not text:
            continue
        if out and not (_unspaced(out[-1]) or _unspaced(text[0])):
            out += " "
        out += text
    return out


def _unspaced(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def stitched_output(request_id: str, long: LongRequest, finished: bool, duration: float,
                    options: DecodingOptions, token_bytes: list[bytes] | None) -> RequestOutput:  # fmt: skip
    """The request's output from its leading finished segments (all of them once `finished`)."""
    parts = long.leading()
    tokens = [t for p in parts for t in p.tokens]
    logprobs = [lp for p in parts for lp in p.logprobs]
    segments = [Segment(id=i, start=long.spans[i][0] / SAMPLE_RATE, end=long.spans[i][1] / SAMPLE_RATE,
                        text=p.text, tokens=p.tokens,
                        avg_logprob=sum(p.logprobs) / len(p.logprobs) if p.logprobs else 0.0)
                for i, p in enumerate(parts)]  # fmt: skip
    reason: FinishReason | None = None
    if finished:
        reason = "length" if any(p.reason == "length" for p in parts) else "stop"
    out = RequestOutput(
        request_id=request_id, text=join_texts([p.text for p in parts]), tokens=tokens, finished=finished,
        finish_reason=reason, segments=segments, duration=duration,
        language=next((p.language for p in parts if p.language), None) or options.language,
        confidence=math.exp(sum(logprobs) / len(logprobs)) if logprobs else None,
    )  # fmt: skip
    if options.logprobs:
        out.token_logprobs = logprobs
        out.token_bytes = token_bytes
    return out
