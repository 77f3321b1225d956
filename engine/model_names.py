"""Model names: a short alias (`small.en`, `distil-large-v3`) or a Hugging Face repo id
(`Systran/faster-whisper-small`, optionally `@revision`), told apart from a local directory.
Pure string work: engine/hub.py downloads what a name names."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from engine.errors import CheckpointError

ALIASES: dict[str, str] = {
    # faster-whisper's names, so `OASR_MODEL=small.en` means what `WhisperModel("small.en")` means.
    **{size: f"Systran/faster-whisper-{size}" for size in (
        "tiny.en", "tiny", "base.en", "base", "small.en", "small", "medium.en", "medium",
        "large-v1", "large-v2", "large-v3")},
    "large": "Systran/faster-whisper-large-v3",
    "distil-small.en": "Systran/faster-distil-whisper-small.en",
    "distil-medium.en": "Systran/faster-distil-whisper-medium.en",
    "distil-large-v2": "Systran/faster-distil-whisper-large-v2",
    "distil-large-v3": "Systran/faster-distil-whisper-large-v3",
    "large-v3-turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
    "turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
    "parakeet-tdt-0.6b-v2": "nvidia/parakeet-tdt-0.6b-v2",
}
"""Short names -> Hugging Face repo ids."""

_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class ModelRef:
    """A model named on a hub."""

    repo_id: str
    revision: str | None = None
    """Branch, tag or commit; None is the repo's default branch."""
    alias: str | None = None
    """The short name it was given by, if any."""

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")


def parse_model_name(name: str, revision: str | None = None) -> ModelRef | None:
    """The hub model `name` refers to, or None when it is an existing local directory.
    `name` may carry its revision (`org/repo@v2`); `revision` given too must agree.
    CheckpointError when it is neither a directory nor a model name."""
    if os.path.isdir(name):
        return None
    base, _, pinned = name.partition("@")
    if pinned and revision and pinned != revision:
        raise CheckpointError(f"model {name!r} pins revision {pinned!r} but revision {revision!r} was given too")
    revision = pinned or revision
    if base in ALIASES:
        return ModelRef(ALIASES[base], revision, alias=base)
    if _REPO_ID.fullmatch(base):
        return ModelRef(base, revision)
    raise CheckpointError(
        f"model {name!r} is not a directory, a known alias ({', '.join(sorted(ALIASES))}) "
        "or a Hugging Face repo id (owner/name)")


__all__ = ["ALIASES", "ModelRef", "parse_model_name"]
