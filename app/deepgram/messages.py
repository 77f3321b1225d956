"""Server messages of Deepgram's live protocol, as plain dicts ready for `json.dumps`.

    Results        {type, channel_index, duration, start, is_final, speech_final, from_finalize,
                    channel: {alternatives: [{transcript, confidence, words: [...]}]}, metadata}
    SpeechStarted  {type, channel, timestamp}
    UtteranceEnd   {type, channel, last_word_end}
    Metadata       {type, transaction_key, request_id, sha256, created, duration, channels,
                    models, model_info}                                  (once, at CloseStream)
    Error          {type, variant, description, message}

Times are seconds of the stream's audio. The audio is transcribed as one channel (several
channels are mixed down), so `channel_index` / `channel` is always [0, 1].
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from engine import Word

CHANNEL = [0, 1]
"""Channel 0 of 1: multichannel audio is mixed down and transcribed once."""
TIME_DECIMALS = 3


@dataclass(frozen=True)
class ModelIdentity:
    """What `metadata.model_info` reports: the served model, not a Deepgram one."""

    name: str
    version: str
    arch: str

    @property
    def uuid(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"oasr:{self.name}:{self.version}"))

    def info(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "arch": self.arch}


def _t(seconds: float) -> float:
    return round(seconds, TIME_DECIMALS)


def plain_word(word: str) -> str:
    """A word as Deepgram writes it without `punctuate`: lower case, no leading or trailing
    punctuation (inner apostrophes and hyphens stay: "don't", "well-known")."""
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1
    while end > start and not word[end - 1].isalnum():
        end -= 1
    return word[start:end].lower()


def plain_text(text: str) -> str:
    return " ".join(w for w in (plain_word(w) for w in text.split()) if w)


def render_words(words: list[Word], offset: float, formatted: bool) -> list[dict[str, Any]]:
    """Engine words (times from the segment's start) -> Deepgram words (stream times)."""
    out = []
    for w in words:
        plain = plain_word(w.word.strip())
        if not plain:  # punctuation the model wrote as a word of its own
            continue
        item: dict[str, Any] = {"word": plain, "start": _t(offset + w.start), "end": _t(offset + w.end),
                                "confidence": round(w.confidence, 4)}
        if formatted:
            item["punctuated_word"] = w.word.strip()
        out.append(item)
    return out


def results(*, request_id: str, model: ModelIdentity, start: float, duration: float, transcript: str,
            confidence: float, words: list[dict[str, Any]], is_final: bool, speech_final: bool,
            from_finalize: bool) -> dict[str, Any]:
    return {
        "type": "Results",
        "channel_index": CHANNEL,
        "duration": _t(duration),
        "start": _t(start),
        "is_final": is_final,
        "speech_final": speech_final,
        "from_finalize": from_finalize,
        "channel": {"alternatives": [{"transcript": transcript, "confidence": round(confidence, 4), "words": words}]},
        "metadata": {"request_id": request_id, "model_info": model.info(), "model_uuid": model.uuid},
    }


def speech_started(timestamp: float) -> dict[str, Any]:
    return {"type": "SpeechStarted", "channel": CHANNEL, "timestamp": _t(timestamp)}


def utterance_end(last_word_end: float) -> dict[str, Any]:
    return {"type": "UtteranceEnd", "channel": CHANNEL, "last_word_end": _t(last_word_end)}


def metadata(*, request_id: str, model: ModelIdentity, sha256: str, created: str, duration: float,
             channels: int) -> dict[str, Any]:
    return {
        "type": "Metadata",
        "transaction_key": "deprecated",
        "request_id": request_id,
        "sha256": sha256,
        "created": created,
        "duration": _t(duration),
        "channels": channels,
        "models": [model.uuid],
        "model_info": {model.uuid: model.info()},
    }


def error(description: str, variant: str, message: str = "") -> dict[str, Any]:
    """`variant`: what went wrong, e.g. 'SchemaError' (an unreadable client message)."""
    return {"type": "Error", "variant": variant, "description": description, "message": message}
