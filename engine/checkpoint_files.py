"""Reading a checkpoint's configuration files, one wording of their errors for every family."""

from __future__ import annotations

import os
from typing import Any

import yaml

from engine.errors import CheckpointError


def read_yaml_mapping(path: str) -> dict[str, Any]:
    """The YAML file at `path`, which must hold a mapping at its top level (CheckpointError if not)."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise CheckpointError(f"cannot read {os.path.basename(path)}: {exc}") from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{os.path.basename(path)}: expected a mapping at the top level")
    return raw


__all__ = ["read_yaml_mapping"]
