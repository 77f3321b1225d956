"""Rendering engine outputs in the shapes clients expect (OpenAI and Google)."""

from __future__ import annotations

import math
from typing import Any

from app.google.wire import google_request_ids
from engine import RequestOutput

LANGUAGE_NAMES = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian", "ko": "korean",
    "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish", "pl": "polish", "ca": "catalan",
    "nl": "dutch", "ar": "arabic", "sv": "swedish", "it": "italian", "id": "indonesian", "hi": "hindi",
    "fi": "finnish", "vi": "vietnamese", "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay",
    "cs": "czech", "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
}


def _clock(seconds: float, decimal: str) -> str:
    ms = round(max(seconds, 0.0) * 1000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{decimal}{ms:03d}"


def to_srt(out: RequestOutput) -> str:
    blocks = []
    for i, seg in enumerate(out.segments, start=1):
        blocks.append(f"{i}\n{_clock(seg.start, ',')} --> {_clock(seg.end, ',')}\n{seg.text.strip()}\n")
    return "\n".join(blocks)


def to_vtt(out: RequestOutput) -> str:
    blocks = ["WEBVTT\n"]
    for seg in out.segments:
        blocks.append(f"{_clock(seg.start, '.')} --> {_clock(seg.end, '.')}\n{seg.text.strip()}\n")
    return "\n".join(blocks)


def usage(out: RequestOutput) -> dict[str, Any]:
    return {"type": "duration", "seconds": math.ceil(out.duration)}


def to_verbose_json(out: RequestOutput, task: str, words: bool, segments: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": task,
        "language": LANGUAGE_NAMES.get(out.language or "en", out.language or "en"),
        "duration": round(out.duration, 3),
        "text": out.text,
        "usage": usage(out),
    }
    if segments:
        body["segments"] = [
            {
                "id": s.id,
                "seek": round(s.start * 100),
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": s.tokens,
                "temperature": s.temperature,
                "avg_logprob": round(s.avg_logprob, 6),
                "compression_ratio": round(s.compression_ratio, 6),
                "no_speech_prob": round(s.no_speech_prob, 6),
            }
            for s in out.segments
        ]
    if words:
        body["words"] = [
            {"word": w.word.strip(), "start": w.start, "end": w.end, "confidence": w.confidence}
            for w in (out.words or [])
        ]
    return body


def google_duration(seconds: float) -> str:
    """protobuf Duration JSON form: '1.500s'."""
    return f"{seconds:.3f}s".replace(".000s", "s")


def to_google_recognize(out: RequestOutput, max_alternatives: int, words: bool, request_id: str) -> dict[str, Any]:
    """Google `RecognizeResponse` JSON: one result for the utterance, best alternative first."""
    results = []
    if out.text:
        best_conf = out.nbest[0].confidence if out.nbest else 0.0
        alternatives: list[dict[str, Any]] = [{"transcript": out.text, "confidence": best_conf}]
        if words:
            alternatives[0]["words"] = [
                {"startTime": google_duration(w.start), "endTime": google_duration(w.end),
                 "word": w.word.strip(), "confidence": w.confidence}
                for w in (out.words or [])
            ]
        for alt in out.nbest[1 : max(1, max_alternatives)]:
            alternatives.append({"transcript": alt.text, "confidence": alt.confidence})
        results.append({"alternatives": alternatives, "resultEndTime": google_duration(out.duration),
                        "languageCode": out.language or "en"})
    return {"results": results, "totalBilledTime": google_duration(math.ceil(out.duration)),
            **google_request_ids(request_id)}


def to_google_recognize_channels(
    tagged: list[tuple[int, RequestOutput]], max_alternatives: int, words: bool, request_id: str
) -> dict[str, Any]:
    """Per-channel recognition: each channel's result carries its `channelTag`, in channel order;
    billed time is the recording's length."""
    results = []
    for tag, out in tagged:
        for result in to_google_recognize(out, max_alternatives, words, request_id)["results"]:
            results.append({**result, "channelTag": tag})
    seconds = max((out.duration for _, out in tagged), default=0.0)
    return {"results": results, "totalBilledTime": google_duration(math.ceil(seconds)),
            **google_request_ids(request_id)}
