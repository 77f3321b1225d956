"""What Google's own client library (google-cloud-speech, REST and gRPC) needs from our wire:
its service and type names, its int64 `request_id`, and which of its RecognitionConfig fields we
do not implement are harmless hints (accepted, ignored) and which would change the transcript
(refused with their name).

Our messages (`oasr.speech.v1`) keep Google's field numbers, so Google's bytes parse into them;
the fields we do not implement are `reserved` in our .proto and arrive as unknown fields, which
`refuse_unsupported` reads back by number. In JSON the same fields come by their JSON names.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from engine.errors import InvalidRequestError

SPEECH_SERVICE = "google.cloud.speech.v1.Speech"
"""The gRPC service name Google's client calls; ours (`oasr.speech.v1.Speech`) answers it too."""

_TYPE_PREFIX = "type.googleapis.com/google.cloud.speech.v1."
METADATA_TYPE_URL = _TYPE_PREFIX + "LongRunningRecognizeMetadata"
RESPONSE_TYPE_URL = _TYPE_PREFIX + "LongRunningRecognizeResponse"

_INT64_MAX = 2**63 - 1

# Google's RecognitionConfig fields we do not implement, by number: (JSON name, harmless).
# Harmless ones are hints about the recording or the billing tier; the others would change
# the transcript (masked words, speakers, other languages, custom classes, spoken punctuation).
_UNIMPLEMENTED_CONFIG: dict[int, tuple[str, bool]] = {
    5: ("profanityFilter", False),
    9: ("metadata", True),
    14: ("useEnhanced", True),
    18: ("alternativeLanguageCodes", False),
    19: ("diarizationConfig", False),
    20: ("adaptation", False),
    22: ("enableSpokenPunctuation", False),
    23: ("enableSpokenEmojis", False),
    24: ("transcriptNormalization", False),
}
_BY_JSON_NAME = {name: (number, harmless) for number, (name, harmless) in _UNIMPLEMENTED_CONFIG.items()}
_SNAKE = {"profanity_filter": "profanityFilter", "use_enhanced": "useEnhanced",
          "alternative_language_codes": "alternativeLanguageCodes", "diarization_config": "diarizationConfig",
          "enable_spoken_punctuation": "enableSpokenPunctuation", "enable_spoken_emojis": "enableSpokenEmojis",
          "transcript_normalization": "transcriptNormalization"}


def new_request_id() -> str:
    """A server-chosen request id: a positive int64 in decimal, so Google's `request_id` is it."""
    return str(secrets.randbelow(_INT64_MAX) + 1)


def google_request_id(request_id: str) -> int:
    """Google's int64 `request_id` for our string id: the id itself when it is a decimal int64,
    else a stable 63-bit number derived from it (the same string always maps to the same number)."""
    if request_id.isdigit() and int(request_id) <= _INT64_MAX:
        return int(request_id)
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _refuse(name: str) -> InvalidRequestError:
    return InvalidRequestError(f"RecognitionConfig.{name} is not supported by this server and would change the "
                               "transcript; leave it unset")


def refuse_unsupported(config: Message) -> None:
    """Refuse (InvalidRequestError naming it) a Google RecognitionConfig field we do not implement
    that would change the result; harmless hints pass. A false bool or an empty message is the
    field's default and changes nothing."""
    for field in UnknownFieldSet(config):
        entry = _UNIMPLEMENTED_CONFIG.get(field.field_number)
        if entry is None or entry[1]:
            continue
        if not field.data:  # varint 0 (false), or an empty message (a BoolValue false, a default)
            continue
        raise _refuse(entry[0])


def strip_config_hints(config: Any) -> Any:
    """A JSON RecognitionConfig (dict) without Google's fields we do not implement: harmless hints
    and default values are dropped, a value that would change the result is refused by name."""
    if not isinstance(config, dict):
        return config
    kept = {}
    for key, value in config.items():
        name = _SNAKE.get(key, key)
        entry = _BY_JSON_NAME.get(name)
        if entry is None:
            kept[key] = value
        elif not entry[1] and value not in (False, None, {}, [], "", {"value": False}):
            raise _refuse(name)
    return kept


def strip_request_hints(body: Any) -> Any:
    """A JSON request (Recognize or LongRunningRecognize) with its `config` stripped of hints."""
    if isinstance(body, dict) and "config" in body:
        return {**body, "config": strip_config_hints(body["config"])}
    return body


def google_request_ids(request_id: str) -> dict[str, str]:
    """The JSON response keys of a request id: Google's int64 `requestId` (a string, as proto3 JSON
    writes int64) and ours, `oasrRequestId`, which Google's clients ignore."""
    return {"requestId": str(google_request_id(request_id)), "oasrRequestId": request_id}
