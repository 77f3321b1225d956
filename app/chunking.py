"""`chunking_strategy` on /v1/audio/transcriptions: VAD segmentation of an uploaded recording.

    "auto"                                   the server's VAD settings
    {"type": "server_vad", "threshold": ..., "silence_duration_ms": ..., "prefix_padding_ms": ...}
                                             as a JSON string, or as the `chunking_strategy[...]`
                                             form fields the openai SDK sends

The recording is cut into speech segments with the same speech gate as live server VAD
(`engine.vad.speech_segments`, padded by prefix_padding_ms), every segment is submitted as its
own engine request at once (so they batch), and the answers are merged into one output whose
`segments` are the speech segments with their real boundaries in the recording. Silence
between segments is never decoded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.requests import Request

from app.disconnect import wait_for_disconnect
from app.engine_service import EngineService
from app.errors import ApiError
from app.live.vad import VadModelCache
from app.offline import run_offline
from engine import DecodingOptions, RequestOutput, Segment, Word
from engine.errors import InvalidRequestError
from engine.vad import VoiceActivityModel, speech_segments

logger = logging.getLogger(__name__)

FIELD = "chunking_strategy"
_KEYS = ("threshold", "silence_duration_ms", "prefix_padding_ms")
_USAGE = ("chunking_strategy must be 'auto' or an object {\"type\": \"server_vad\", \"threshold\", "
          "\"silence_duration_ms\", \"prefix_padding_ms\"}")


@dataclass(frozen=True)
class ChunkingStrategy:
    threshold: float = 0.5
    silence_duration_ms: int = 500
    prefix_padding_ms: int = 300
    """Audio kept on each side of a speech run (halved where two runs are closer)."""


def _bad(message: str) -> ApiError:
    return ApiError(400, message, param=FIELD)


def parse_chunking_strategy(form: Sequence[tuple[str, Any]], defaults: ChunkingStrategy) -> ChunkingStrategy | None:
    """The request's chunking strategy from its form items, or None when it asks for none."""
    raw = [v for k, v in form if k == FIELD]
    nested = {k[len(FIELD) + 1 : -1]: v for k, v in form if k.startswith(FIELD + "[") and k.endswith("]")}
    if not raw and not nested:
        return None
    if (raw and nested) or len(raw) > 1:
        raise _bad(f"send {FIELD} once: as a value or as {FIELD}[...] fields, not both")
    fields: Any = nested
    if raw:
        value = raw[0]
        if not isinstance(value, str):
            raise _bad(_USAGE)
        value = value.strip()
        if value == "auto":
            return defaults
        if value in ("", "null"):
            return None
        try:
            fields = json.loads(value)
        except ValueError as exc:
            raise _bad(f"{_USAGE}; got {value[:80]!r}") from exc
    if not isinstance(fields, dict):
        raise _bad(_USAGE)
    if fields.get("type") != "server_vad":
        raise _bad(f"{FIELD}.type must be 'server_vad', got {fields.get('type')!r}")
    unknown = set(fields) - {"type", *_KEYS}
    if unknown:
        raise _bad(f"unknown {FIELD} field(s): {', '.join(sorted(unknown))}")
    asked: dict[str, Any] = {k: _number(k, fields[k]) for k in _KEYS if fields.get(k) is not None}
    strategy = dataclasses.replace(defaults, **asked)
    if not 0.0 < strategy.threshold < 1.0:
        raise _bad(f"{FIELD}.threshold must be in (0, 1), got {strategy.threshold}")
    for key in ("silence_duration_ms", "prefix_padding_ms"):
        if not 0 <= getattr(strategy, key) <= 60_000:
            raise _bad(f"{FIELD}.{key} must be in [0, 60000] ms, got {getattr(strategy, key)}")
    return strategy


def _number(key: str, value: Any) -> float | int:
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise _bad(f"{FIELD}.{key} must be a number, got {value!r}") from exc
    if key == "threshold":
        return number
    if not number.is_integer():
        raise _bad(f"{FIELD}.{key} must be a whole number of ms, got {value!r}")
    return int(number)


async def chunking_from_request(request: Request) -> ChunkingStrategy | None:
    """Parse `chunking_strategy` from the (already read) multipart form; defaults are the
    server's VAD settings."""
    settings = request.app.state.settings
    defaults = ChunkingStrategy(threshold=settings.vad_threshold, silence_duration_ms=settings.vad_silence_duration_ms,
                                prefix_padding_ms=settings.vad_prefix_padding_ms)
    form = await request.form()
    return parse_chunking_strategy(form.multi_items(), defaults)


async def transcribe_chunked(
    request: Request,
    service: EngineService,
    audio: np.ndarray,
    options: DecodingOptions,
    strategy: ChunkingStrategy,
    *,
    api: str,
    timeout: float,
) -> RequestOutput:
    """Segment `audio` (float32 at the model rate) by voice activity and transcribe the speech
    segments concurrently; one merged output. A disconnect or a failure aborts every segment."""
    model = await VadModelCache.of(request.app.state).get()
    if model is None:
        raise ApiError(503, f"chunking_strategy needs the server's VAD model, which failed to load "
                            f"({VadModelCache.of(request.app.state).error})", param=FIELD)
    rate = service.sample_rate
    bounds = await asyncio.to_thread(_segments, audio, rate, model, strategy)
    duration = audio.size / rate
    logger.info("chunking_strategy: %d speech segment(s) in %.1f s of audio", len(bounds), duration)
    if not bounds:
        return RequestOutput(request_id="", finished=True, finish_reason="stop", duration=duration,
                             language=options.language, words=[] if options.word_timestamps else None)
    gone = asyncio.ensure_future(wait_for_disconnect(request))
    tasks = [
        asyncio.ensure_future(run_offline(service, np.ascontiguousarray(audio[round(s * rate) : round(e * rate)]),
                                          options, api=api, timeout=timeout, disconnected=_shared(gone)))
        for s, e in bounds
    ]
    try:
        outputs = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        gone.cancel()
    return merge_segments(bounds, outputs, duration)


def _shared(gone: asyncio.Future[None]) -> Awaitable[object]:
    """Each segment may cancel its waiter; the one disconnect watcher must survive that."""
    return asyncio.shield(gone)


def _segments(audio: np.ndarray, rate: int, model: VoiceActivityModel,
              strategy: ChunkingStrategy) -> list[tuple[float, float]]:
    try:
        return speech_segments(audio, rate, model=model, threshold=strategy.threshold,
                               silence_duration_ms=strategy.silence_duration_ms,
                               padding_ms=strategy.prefix_padding_ms)
    except InvalidRequestError as exc:
        raise _bad(str(exc)) from exc


def merge_segments(bounds: Sequence[tuple[float, float]], outputs: Sequence[RequestOutput],
                   duration: float) -> RequestOutput:
    """One output for the whole recording: a segment per speech segment that has text, at its
    boundaries in the recording; word times shifted by the segment start."""
    segments: list[Segment] = []
    words: list[Word] = []
    for (start, end), out in zip(bounds, outputs):
        text = out.text.strip()
        shifted = [dataclasses.replace(w, start=round(w.start + start, 3), end=round(w.end + start, 3))
                   for w in out.words or []]
        words += shifted
        if not text:
            continue
        inner = out.segments
        tokens = [t for s in inner for t in s.tokens]
        weights = [max(len(s.tokens), 1) for s in inner]
        segments.append(Segment(
            id=len(segments), start=round(start, 3), end=round(end, 3), text=" " + text, tokens=tokens,
            avg_logprob=float(np.average([s.avg_logprob for s in inner], weights=weights)) if inner else 0.0,
            no_speech_prob=min((s.no_speech_prob for s in inner), default=0.0),
            compression_ratio=max((s.compression_ratio for s in inner), default=0.0),
            temperature=max((s.temperature for s in inner), default=0.0),
            words=shifted or None,
        ))
    want_words = any(out.words is not None for out in outputs)
    merged = RequestOutput(
        request_id=outputs[0].request_id if outputs else "",
        text=" ".join(s.text.strip() for s in segments),
        finished=True,
        finish_reason="length" if any(o.finish_reason == "length" for o in outputs) else "stop",
        words=words if want_words else None,
        segments=segments,
        language=next((o.language for o in outputs if o.language), None),
        duration=duration,
    )
    if outputs and all(o.token_logprobs is not None and o.token_bytes is not None for o in outputs):
        merged.tokens = [t for o in outputs for t in o.tokens]
        merged.token_logprobs = [lp for o in outputs for lp in o.token_logprobs or []]
        merged.token_bytes = [b for o in outputs for b in o.token_bytes or []]
    return merged
