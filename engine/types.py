"""Wire types of the engine: per-request options, outputs, and the commands posted to it.

Plain dataclasses only (no torch, no pydantic; audio is a numpy array) so every surface can build and read them,
and mypy checks them strictly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from engine.errors import InvalidRequestError

Samples = npt.NDArray[np.float32]
"""A mono waveform: float32 samples in [-1, 1] at the model's rate."""

FinishReason = Literal["stop", "length", "error", "abort"]
Task = Literal["transcribe", "translate"]
Delay = Literal["minimal", "low", "medium", "high", "xhigh"]
DELAYS: tuple[Delay, ...] = ("minimal", "low", "medium", "high", "xhigh")

MAX_BEAM_SIZE = 30
MAX_N_BEST = 30
MAX_TEMPERATURE = 2.0
MAX_KEYWORDS = 100
MAX_KEYWORD_CHARS = 100


@dataclass(frozen=True)
class DecodingOptions:
    """How one request is decoded; independent of engine configuration."""

    beam_size: int = 1
    """Beams per window; 1 is greedy (or sampling when temperature > 0)."""
    n_best: int = 1
    """Alternatives returned in `RequestOutput.nbest` (<= beam_size when beam searching)."""
    temperature: float = 0.0
    """0 decodes greedily/beam; > 0 samples, and starts Whisper's fallback ladder there."""
    temperature_fallback: bool = True
    """Retry a window at higher temperatures when it fails the compression/logprob checks."""
    best_of: int = 5
    """Candidates drawn for a sampled window (temperature > 0, the fallback attempts included);
    the most likely per token is kept (openai/whisper's and faster-whisper's default, 5)."""
    top_k: int | None = None
    """Sample only among the k most likely tokens (temperature > 0)."""
    top_p: float | None = None
    """Nucleus sampling mass in (0, 1] (temperature > 0)."""
    seed: int | None = None
    """Seed for sampling; fixed seeds make sampled transcripts reproducible."""
    language: str | None = None
    """ISO 639-1 code; None detects it on multilingual models."""
    task: Task = "transcribe"
    prompt: str | None = None
    """Previous-text prompt conditioning the first window."""
    word_timestamps: bool = False
    max_new_tokens: int | None = None
    """Cap on generated tokens per window (the model's text context bounds it anyway)."""
    no_speech_threshold: float = 0.6
    """A window whose no-speech probability exceeds this (and avg logprob < -1) is silence."""
    condition_on_previous_text: bool = True
    """Long-form: prompt each window with the text of the previous ones."""
    keywords: tuple[str, ...] = ()
    """Words or phrases to bias recognition toward (per-request vocabulary). Each family applies
    them its own way: Whisper adds them to the decoder prompt; CTC and transducer families boost
    their token sequences during search (contextual biasing)."""
    logprobs: bool = False
    """Report each token's log-probability in `RequestOutput.token_logprobs`."""
    delay: Delay | None = None
    """Streaming latency/accuracy trade-off, 'minimal' (fastest partials and commits) to 'xhigh'
    (most context before committing); each family maps it to its own streaming setting. None
    keeps the engine's configured default."""
    stream_context: tuple[int, int, int] | None = None
    """Buffered streaming: (left, chunk, right) context in encoder frames for this stream, for
    families that re-run a window per step; None keeps the engine's default preset."""

    def validate(self) -> None:
        """Raise InvalidRequestError naming the first out-of-range option."""
        if not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            raise InvalidRequestError(f"beam_size must be in [1, {MAX_BEAM_SIZE}], got {self.beam_size}")
        if not 1 <= self.best_of <= MAX_BEAM_SIZE:
            raise InvalidRequestError(f"best_of must be in [1, {MAX_BEAM_SIZE}], got {self.best_of}")
        if not 1 <= self.n_best <= MAX_N_BEST:
            raise InvalidRequestError(f"n_best must be in [1, {MAX_N_BEST}], got {self.n_best}")
        if self.beam_size > 1 and self.n_best > self.beam_size:
            raise InvalidRequestError(f"n_best ({self.n_best}) cannot exceed beam_size ({self.beam_size})")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)):
            raise InvalidRequestError(f"temperature must be a finite number, got {self.temperature!r}")
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            raise InvalidRequestError(f"temperature must be in [0, {MAX_TEMPERATURE}], got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise InvalidRequestError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.task not in ("transcribe", "translate"):
            raise InvalidRequestError(f"task must be 'transcribe' or 'translate', got {self.task!r}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise InvalidRequestError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0.0 <= self.no_speech_threshold <= 1.0:
            raise InvalidRequestError(f"no_speech_threshold must be in [0, 1], got {self.no_speech_threshold}")
        if self.language is not None and not (isinstance(self.language, str) and 2 <= len(self.language) <= 8):
            raise InvalidRequestError(f"language must be a language code such as 'en', got {self.language!r}")
        self._validate_keywords()
        if self.delay is not None and self.delay not in DELAYS:
            raise InvalidRequestError(f"delay must be one of {', '.join(DELAYS)}, got {self.delay!r}")
        if self.stream_context is not None:
            ctx = self.stream_context
            if not (isinstance(ctx, tuple) and len(ctx) == 3 and all(type(v) is int for v in ctx)):
                raise InvalidRequestError(f"stream_context must be (left, chunk, right) integers, got {ctx!r}")
            if ctx[0] < 0 or ctx[1] < 1 or ctx[2] < 0:
                raise InvalidRequestError(f"stream_context needs left >= 0, chunk >= 1, right >= 0, got {ctx!r}")

    def _validate_keywords(self) -> None:
        if not isinstance(self.keywords, tuple):
            raise InvalidRequestError(f"keywords must be a tuple of strings, got {type(self.keywords).__name__}")
        if len(self.keywords) > MAX_KEYWORDS:
            raise InvalidRequestError(f"at most {MAX_KEYWORDS} keywords, got {len(self.keywords)}")
        for word in self.keywords:
            if not isinstance(word, str) or not word.strip():
                raise InvalidRequestError(f"keywords must be non-empty strings, got {word!r}")
            if len(word) > MAX_KEYWORD_CHARS:
                raise InvalidRequestError(f"keyword longer than {MAX_KEYWORD_CHARS} characters: {word[:20]!r}...")


@dataclass
class Word:
    word: str
    start: float
    """Seconds from the start of the request's audio."""
    end: float
    confidence: float
    """Mean token probability of the word, in [0, 1]."""
    tokens: list[int] | None = None
    """The word's token ids, for families that keep them per word (live Whisper with `logprobs`)."""
    logprobs: list[float] | None = None
    """Log-probability of each of `tokens` (requested with `DecodingOptions.logprobs`)."""


@dataclass
class Segment:
    id: int
    start: float
    end: float
    text: str
    tokens: list[int] = field(default_factory=list)
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0
    compression_ratio: float = 0.0
    temperature: float = 0.0
    words: list[Word] | None = None


@dataclass
class Alternative:
    text: str
    confidence: float
    """exp(length-normalized log-probability), in [0, 1]."""


@dataclass
class RequestOutput:
    """What the engine reports for one request after a step.

    Offline requests report once, finished. Streaming requests report partials
    (finished=False) whose `text` = `committed` + `tentative`; committed text never changes.
    """

    request_id: str
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: FinishReason | None = None
    error: str | None = None
    error_stage: str | None = None
    """Where an error happened: 'admission', 'features', 'encode', 'decode', 'postprocess'."""
    words: list[Word] | None = None
    segments: list[Segment] = field(default_factory=list)
    nbest: list[Alternative] = field(default_factory=list)
    language: str | None = None
    duration: float = 0.0
    """Seconds of audio this output covers."""
    committed: str = ""
    """Streaming: text that will never change."""
    tentative: str = ""
    """Streaming: text after `committed` that may still be revised."""
    confidence: float | None = None
    """Utterance-level confidence in [0, 1] (the family's own measure, e.g. exp of the mean token
    log-probability); None when the family reports none."""
    timestamps: list[float] | None = None
    """Start time in seconds of each token in `tokens`, where the family produces them."""
    token_logprobs: list[float] | None = None
    """Log-probability of each token in `tokens` (requested with `DecodingOptions.logprobs`)."""
    token_bytes: list[bytes] | None = None
    """UTF-8 bytes of each token in `tokens`, given with `token_logprobs` (a token may hold part
    of a character, so its bytes, not its text, are exact)."""
    search_overflow: bool = False
    """The decoder's search hit a capacity limit it could not recover from: the transcript may be
    missing words. Counted by `oasr_engine_search_overflow_total`."""
    decoded: float | None = None
    """Offline partial outputs: seconds of the request's audio decoded so far, in any order (a long
    recording's windows decode side by side and finish out of order, while `text` and `duration`
    cover only what can be read in order); None: `duration`."""

    @property
    def progress_seconds(self) -> float:
        """Seconds of the request's audio done: what progress (a job's percent, the queue's rate) counts."""
        return self.duration if self.decoded is None else self.decoded

    @property
    def is_error(self) -> bool:
        return self.finish_reason == "error"

    @property
    def nbest_texts(self) -> list[str]:
        """Alternative transcripts, best first (just `text` when the decode kept one)."""
        return [a.text for a in self.nbest] if self.nbest else [self.text]


# ---- Commands posted by the serving layer onto the engine's command queue ----


@dataclass
class AddRequest:
    request_id: str
    audio: Samples | None
    """float32 mono samples at the model rate; None for a streaming request."""
    streaming: bool = False
    priority: int = 0
    decoding: DecodingOptions | None = None


@dataclass
class FeedAudio:
    request_id: str
    chunk: Samples
    """float32 mono samples at the model rate (may be empty when is_last)."""
    is_last: bool = False
    attached: bool = False
    """The stream's whole input at once: the engine releases it one stream chunk per step, as
    if it arrived live, and ends the input after the last (implies is_last)."""


@dataclass
class AbortRequest:
    request_id: str


Command = AddRequest | FeedAudio | AbortRequest
