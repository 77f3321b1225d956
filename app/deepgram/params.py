"""The query string of `GET /v1/listen` (Deepgram's live parameters) -> `ListenParams`.

Every parameter Deepgram's live API defines is either served, accepted with a documented
best-effort meaning, or refused with a reason; an unknown name is refused too (a typo such as
`interim_result=true` would otherwise silently change nothing). Values are checked the way
Deepgram states them: booleans are `true`/`false`, times are integer milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from app.audio import MAX_CHANNELS, MAX_SAMPLE_RATE_HZ, MIN_SAMPLE_RATE_HZ
from engine.errors import InvalidRequestError
from engine.languages import language_code
from engine.types import MAX_KEYWORD_CHARS, MAX_KEYWORDS

Encoding = Literal["linear16", "mulaw", "alaw", "opus", "flac"]
HEADERLESS: frozenset[Encoding] = frozenset({"linear16", "mulaw", "alaw"})
"""Encodings whose bytes carry no rate or channel count: `sample_rate` is required."""
_ENCODINGS: dict[str, Encoding] = {"linear16": "linear16", "mulaw": "mulaw", "alaw": "alaw", "opus": "opus",
                                   "ogg-opus": "opus", "flac": "flac"}
_UNSERVED_ENCODINGS = ("linear32", "amr-nb", "amr-wb", "speex", "g729")

MIN_ENDPOINTING_MS = 200
"""Shortest silence that ends a segment. Deepgram's default is 10 ms; here a segment is one engine
request decoded on its own, and cutting at every pause between words costs the decoder its
context (tiny.en loses words at the cuts), so shorter values are raised to this."""
MAX_TIME_MS = 60_000
"""Longest `endpointing` / `utterance_end_ms` accepted (the VAD's own bound)."""

_BOOLEANS = {"true": True, "false": False}
_KEYWORD_BOOST = re.compile(r"^(?P<word>.+?)(?::(?P<boost>[+-]?\d+(?:\.\d+)?))?$")

SERVED = frozenset({"encoding", "sample_rate", "channels", "interim_results", "endpointing", "utterance_end_ms",
                    "vad_events", "punctuate", "smart_format", "language", "keywords", "keyterm"})
IGNORED = frozenset({"model", "version", "tier", "tag", "extra", "mip_opt_out", "profanity_filter", "filler_words",
                     "numerals", "measurements", "no_delay"})
"""Accepted and not applied here: naming (model, version, tier; with several models served, the
route picks the engine by `model` before the session starts: app/routes/listen.py), bookkeeping
(tag, extra, mip_opt_out), formatting that Whisper's own output already decides (see docs), and
`no_delay` (smart_format's latency hint, which livekit-plugins-deepgram always sends: results here
never wait for a number to complete)."""
REFUSED_WHEN_ON = {
    "diarize": "speaker diarization", "multichannel": "per-channel transcription", "detect_entities": "entity detection",
    "dictation": "spoken punctuation commands", "paragraphs": "paragraphs", "utterances": "utterance splitting",
    "detect_language": "language detection by flag (omit language instead)",
}
"""Boolean features that change the transcript's shape; `=false` is accepted."""
REFUSED = {
    "diarize_model": "speaker diarization", "redact": "redaction", "search": "search", "replace": "find and replace",
    "callback": "callbacks (results come back on this socket)", "callback_method": "callbacks",
    "language_hint": "language hints", "alternatives": "alternatives", "topics": "topic detection",
    "sentiment": "sentiment analysis", "intents": "intent recognition", "summarize": "summaries",
}


class QueryError(ValueError):
    """A query parameter this server refuses; the message is written for the client."""


@dataclass(frozen=True)
class ListenParams:
    encoding: Encoding | None = None
    """None: a container (WebM, Ogg, WAV, FLAC, MP3) recognised from its first bytes."""
    sample_rate: int | None = None
    channels: int = 1
    interim_results: bool = False
    endpointing_ms: int | None = None
    """Silence that ends a segment with `speech_final: true`; None: endpointing is off."""
    endpointing_given: bool = False
    """The client chose `endpointing` (so it must be served, not just defaulted)."""
    utterance_end_ms: int | None = None
    vad_events: bool = False
    punctuate: bool = False
    smart_format: bool = False
    language: str | None = None
    """ISO 639 code for the engine (the primary subtag of a BCP-47 tag); None: detect."""
    keywords: tuple[str, ...] = ()

    @property
    def formatted(self) -> bool:
        """Transcripts keep the model's casing and punctuation (`punctuate` or `smart_format`)."""
        return self.punctuate or self.smart_format

    @property
    def needs_vad(self) -> bool:
        """Options only the server VAD can serve (without it a segment ends at Finalize / CloseStream)."""
        explicit_endpointing = self.endpointing_given and self.endpointing_ms is not None
        return explicit_endpointing or self.vad_events or self.utterance_end_ms is not None


def parse_params(items: Iterable[tuple[str, str]], default_endpointing_ms: int) -> ListenParams:
    """Query pairs (repeated names allowed) -> ListenParams, or QueryError naming the problem."""
    values: dict[str, list[str]] = {}
    for name, value in items:
        values.setdefault(name, []).append(value)
    for name in values:
        _check_name(name, values[name])
    one = {name: _single(name, vs) for name, vs in values.items() if name in SERVED - {"keywords", "keyterm"}}

    encoding = _encoding(one.get("encoding"))
    sample_rate = _integer(one, "sample_rate", MIN_SAMPLE_RATE_HZ, MAX_SAMPLE_RATE_HZ)
    if encoding in HEADERLESS and sample_rate is None:
        raise QueryError(f"sample_rate is required with encoding={encoding} (headerless audio carries no rate)")
    channels = _integer(one, "channels", 1, MAX_CHANNELS)
    interim = _boolean(one, "interim_results")
    endpointing_given = "endpointing" in one
    endpointing = _endpointing(one.get("endpointing"), default_endpointing_ms)
    utterance_end = _integer(one, "utterance_end_ms", 1, MAX_TIME_MS)
    if utterance_end is not None and not interim:
        raise QueryError("utterance_end_ms needs interim_results=true (as on Deepgram)")
    return ListenParams(
        encoding=encoding, sample_rate=sample_rate, channels=channels if channels is not None else 1,
        interim_results=interim, endpointing_ms=endpointing, endpointing_given=endpointing_given,
        utterance_end_ms=utterance_end, vad_events=_boolean(one, "vad_events"), punctuate=_boolean(one, "punctuate"),
        smart_format=_boolean(one, "smart_format"), language=_language(one.get("language")),
        keywords=_keywords(values.get("keywords", []), values.get("keyterm", [])),
    )


def _check_name(name: str, values: list[str]) -> None:
    if name in SERVED or name in IGNORED:
        return
    if name in REFUSED_WHEN_ON:
        if any(v.lower() != "false" for v in values):
            raise QueryError(f"{name}: {REFUSED_WHEN_ON[name]} is not supported by this server")
        return
    if name in REFUSED:
        raise QueryError(f"{name}: {REFUSED[name]} is not supported by this server")
    raise QueryError(f"unknown query parameter {name!r}")


def _single(name: str, values: list[str]) -> str:
    if len(values) > 1:
        raise QueryError(f"{name} is given {len(values)} times; give it once")
    return values[0]


def _encoding(value: str | None) -> Encoding | None:
    if value is None:
        return None
    key = value.strip().lower()
    if key in _ENCODINGS:
        return _ENCODINGS[key]
    if key in _UNSERVED_ENCODINGS:
        raise QueryError(f"encoding={value} is not supported; use linear16, mulaw, alaw, opus (Ogg/WebM) or flac")
    raise QueryError(f"unknown encoding {value!r}; use linear16, mulaw, alaw, opus (Ogg/WebM) or flac, or omit it "
                     "for containerized audio")


def _boolean(one: dict[str, str], name: str) -> bool:
    value = one.get(name)
    if value is None:
        return False
    try:
        return _BOOLEANS[value.strip().lower()]
    except KeyError:
        raise QueryError(f"{name} must be true or false, got {value!r}") from None


def _integer(one: dict[str, str], name: str, low: int, high: int) -> int | None:
    value = one.get(name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise QueryError(f"{name} must be an integer, got {value!r}") from None
    if not low <= number <= high:
        raise QueryError(f"{name} must be from {low} to {high}, got {number}")
    return number


def _endpointing(value: str | None, default_ms: int) -> int | None:
    """`endpointing=false` turns it off; `true` or absent keep the server's default; a number of
    ms below MIN_ENDPOINTING_MS is raised to it."""
    if value is None or value.strip().lower() == "true":
        return max(default_ms, MIN_ENDPOINTING_MS)
    if value.strip().lower() == "false":
        return None
    ms = _integer({"endpointing": value}, "endpointing", 0, MAX_TIME_MS)
    assert ms is not None
    return max(ms, MIN_ENDPOINTING_MS)


def _language(value: str | None) -> str | None:
    """`multi` (Deepgram's multilingual mode) detects; a tag goes through the one normaliser."""
    if value is None or value.strip().lower() == "multi":
        return None
    try:
        return language_code(value)
    except InvalidRequestError as exc:
        raise QueryError(str(exc)) from None


def _keywords(keywords: list[str], keyterms: list[str]) -> tuple[str, ...]:
    """`keywords=word:boost` (the boost is dropped: the engine's biasing has one strength) and
    `keyterm=phrase`, in order, without repeats. A negative boost asks for suppression, which
    biasing cannot do: refused."""
    out: list[str] = []
    for raw in keywords:
        match = _KEYWORD_BOOST.match(raw.strip())
        if match is None:
            raise QueryError(f"keywords: empty keyword {raw!r}")
        if match["boost"] is not None and float(match["boost"]) < 0:
            raise QueryError(f"keywords: {raw!r} asks to suppress a word; only boosting is supported")
        out.append(match["word"].strip())
    out.extend(term.strip() for term in keyterms)
    for term in out:
        if not term:
            raise QueryError("keywords and keyterm must not be empty")
        if len(term) > MAX_KEYWORD_CHARS:
            raise QueryError(f"a keyword is longer than {MAX_KEYWORD_CHARS} characters: {term[:20]!r}...")
    unique = tuple(dict.fromkeys(out))
    if len(unique) > MAX_KEYWORDS:
        raise QueryError(f"at most {MAX_KEYWORDS} keywords and keyterms together, got {len(unique)}")
    return unique
