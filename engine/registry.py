"""Model families, registered by name. The engine picks the one whose `detect` accepts the
checkpoint directory; the core imports no family directly."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from engine.config import EngineConfig
from engine.errors import CheckpointError
from engine.runner import ModelRunner


@dataclass(frozen=True)
class ModelFamily:
    name: str
    detect: Callable[[str], bool]
    """True when the checkpoint directory holds this family's files."""
    build: Callable[[EngineConfig], ModelRunner]


FAMILIES: dict[str, ModelFamily] = {}

# Modules that register a family on import. Listed here so that the engine core stays free
# of family names while every family is known before detection runs.
_FAMILY_MODULES = ("engine.models.whisper", "engine.models.wenet", "engine.models.nemo")


def register(family: ModelFamily) -> ModelFamily:
    FAMILIES[family.name] = family
    return family


def _load_builtin_families() -> None:
    for module in _FAMILY_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the family exists but a dependency of it is missing
                raise


def resolve_family(ckpt_dir: str) -> ModelFamily:
    _load_builtin_families()
    for family in FAMILIES.values():
        if family.detect(ckpt_dir):
            return family
    raise CheckpointError(
        f"no model family recognises checkpoint directory {ckpt_dir!r} (known: {', '.join(sorted(FAMILIES))})"
    )
