"""Validation of realtime server events against tests/schemas/openai_realtime_ga_events.json
(OpenAI's GA transcription-session events, plus OASR's own under `oasr_events`)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "openai_realtime_ga_events.json"


@functools.cache
def _validators() -> dict[str, Any]:
    from jsonschema import Draft202012Validator

    document = json.loads(SCHEMA_PATH.read_text())
    schemas = {**document["events"], **document["oasr_events"]}
    return {name: Draft202012Validator({"$defs": document["$defs"], **schema}) for name, schema in schemas.items()}


def schema_errors(event: dict[str, Any]) -> list[str]:
    """Why `event` does not match its schema (empty when it does); an event type the GA
    reference has no schema for is an error too."""
    validator = _validators().get(str(event.get("type")))
    if validator is None:
        return [f"no schema for event type {event.get('type')!r}"]
    return [f"{'/'.join(map(str, e.absolute_path)) or '<event>'}: {e.message}" for e in validator.iter_errors(event)]


def check_schema(events: list[dict[str, Any]]) -> None:
    """Assert every event matches its schema."""
    bad = {i: schema_errors(e) for i, e in enumerate(events)}
    bad = {i: errs for i, errs in bad.items() if errs}
    assert not bad, "\n".join(f"{events[i].get('type')}: {errs}" for i, errs in bad.items())
