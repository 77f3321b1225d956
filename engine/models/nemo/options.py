"""The nemo family's engine options and how streaming settings are chosen.

Cache-aware look-ahead: a trained [L, R] of `encoder.att_context_size` is selected by the engine's
`chunk_size = R + 1` and `num_left_chunks = L // (R + 1)` (-1 for an unlimited left context);
EngineConfig's untouched defaults (16, -1) select the checkpoint's default (its first) look-ahead.
Any other untrained pair is refused, naming the trained ones.

Buffered presets (L, C, R) in encoder frames: a request's `stream_context` must use trained
choices (`encoder.att_chunk_context_size`: left, chunk and right lists); the named presets are
(max L, v, v) for every v both a chunk and a right choice, by latency. `DecodingOptions.delay`
picks among them: minimal = the shortest, xhigh = the longest, low / medium / high evenly
between. The engine default is `NemoOptions.stream_context`, else the `medium` preset.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import InvalidRequestError
from engine.models.nemo.config import EncoderConfig
from engine.types import DELAYS, Delay

MAX_WINDOW_FRAMES = 4000
"""Longest buffered window L + C + R (320 s at 80 ms frames), as seed 004 bounds it."""
DEFAULT_ENGINE_CHUNK = (16, -1)
"""EngineConfig's defaults of (chunk_size, num_left_chunks): 'not chosen' for this family."""


@dataclass(frozen=True)
class NemoOptions:
    stream_context: tuple[int, int, int] | None = None
    """Buffered streaming: the default (left, chunk, right) window in encoder frames for streams
    that name none; unset is the 'medium' delay preset of the checkpoint's trained choices."""
    max_streams: int = 256
    """Live streams (and queued offline requests) at once: rows of the per-stream state slots."""
    language: str = ""
    """ISO 639-1 code of the language the checkpoint transcribes, declared in /v1/models so requests
    naming it are served (NeMo configs do not record it; '' declares none). E.g. 'en' for Parakeet."""
    tentative_partials: bool = True
    """Buffered streaming: a partial also decodes the window's right context from a copy of the
    decoder state and shows those tokens as tentative text after the committed ones."""
    # Costs one more greedy decode of R frames a step: +5-30 % CPU a step on a 256 x 16 model
    # (benchmarks/records/history.md; `asrbench engine lockstep --family nemo-buffered`); off trades
    # that text for capacity.
    keyword_boost: float = 3.0
    """Bonus (log-probability) per matched token of a request's keywords (contextual biasing): in
    the CTC prefix beam search, or in the RNN-T beam search (icefall's ContextGraph scoring)."""
    long_audio_seconds: float = 60.0
    """Offline requests up to this long attend over the whole file at once (memory grows with the
    square of the length); longer ones are encoded in windows (`long_window_seconds`), NeMo's
    buffered inference, so a request's memory stays that of one window however long it is."""
    long_window_seconds: tuple[float, float, float] = (10.0, 30.0, 10.0)
    """(left, chunk, right) seconds of a long offline request's windows: each step encodes
    left + chunk + right and decodes the chunk's frames, the decoder state carried across steps.
    50 s windows cost 1.67x the encoder work of one pass and see at least 10 s each side."""

    def __post_init__(self) -> None:
        if not self.long_audio_seconds > 0:
            raise ValueError(f"long_audio_seconds must be > 0, got {self.long_audio_seconds}")
        left, chunk, right = self.long_window_seconds
        if not (left >= 0 and chunk > 0 and right >= 0):
            raise ValueError(f"long_window_seconds must be (left >= 0, chunk > 0, right >= 0), got {self.long_window_seconds}")


def select_look_ahead(cfg: EncoderConfig, chunk_size: int, num_left_chunks: int) -> tuple[int, int]:
    trained = [(s[0], s[1]) for s in cfg.att_context_sizes]
    for left, right in trained:
        lefts = -1 if left < 0 else left // (right + 1)
        if right + 1 == chunk_size and lefts == num_left_chunks:
            return left, right
    if (chunk_size, num_left_chunks) == DEFAULT_ENGINE_CHUNK:
        return trained[0]
    settings = ", ".join(f"[{lf}, {r}] (chunk_size={r + 1}, num_left_chunks={-1 if lf < 0 else lf // (r + 1)})"
                         for lf, r in trained)  # fmt: skip
    raise InvalidRequestError(
        f"chunk_size={chunk_size}, num_left_chunks={num_left_chunks} is not a trained look-ahead of this "
        f"checkpoint; trained: {settings}"
    )


def buffered_presets(cfg: EncoderConfig) -> list[tuple[int, int, int]]:
    choices = cfg.att_chunk_context_size
    if choices is None:
        return []
    lefts, chunks, rights = choices
    both = sorted(set(chunks) & set(rights)) or sorted(chunks)
    return [(max(lefts), v, v if v in rights else min(rights)) for v in both]


def delay_preset(presets: list[tuple[int, int, int]], delay: Delay) -> tuple[int, int, int]:
    i = DELAYS.index(delay)
    return presets[int(i * (len(presets) - 1) / (len(DELAYS) - 1) + 0.5)]


def check_stream_context(cfg: EncoderConfig, ctx: tuple[int, int, int]) -> None:
    """InvalidRequestError unless (L, C, R) uses the checkpoint's trained choices."""
    if sum(ctx) > MAX_WINDOW_FRAMES:
        raise InvalidRequestError(f"stream_context window {sum(ctx)} frames exceeds {MAX_WINDOW_FRAMES}")
    choices = cfg.att_chunk_context_size
    if choices is None:
        return
    for name, value, allowed in zip(("left", "chunk", "right"), ctx, choices, strict=True):
        if value not in allowed:
            raise InvalidRequestError(
                f"stream_context {name}={value} frames is not trained; this checkpoint takes left in "
                f"{list(choices[0])}, chunk in {list(choices[1])}, right in {list(choices[2])} (80 ms frames)"
            )


def request_context(
    cfg: EncoderConfig, default: tuple[int, int, int], ctx: tuple[int, int, int] | None, delay: Delay | None
) -> tuple[int, int, int]:
    """The (L, C, R) a buffered stream runs with."""
    if ctx is not None:
        check_stream_context(cfg, ctx)
        return ctx
    if delay is not None:
        presets = buffered_presets(cfg)
        if presets:
            return delay_preset(presets, delay)
    return default
