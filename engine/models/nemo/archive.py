"""Reading NeMo's `.nemo` archive without NeMo: a tar holding `model_config.yaml`,
`model_weights.ckpt` (a torch state dict) and artifacts such as the SentencePiece model, whose
names carry a 32-hex prefix (`<hash>_tokenizer.model`) and are referred to from the config as
`nemo:<hash>_tokenizer.model`.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from engine.errors import CheckpointError

if TYPE_CHECKING:
    import torch

CONFIG_NAME = "model_config.yaml"
WEIGHTS_NAME = "model_weights.ckpt"
ARTIFACT_PREFIX = "nemo:"
"""How the config points at a file inside the archive."""


@dataclass(frozen=True)
class NemoArchive:
    path: str
    config: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    artifacts: dict[str, bytes]
    """Every other regular file, by base name (e.g. 'ab12..._tokenizer.model')."""

    def artifact(self, reference: str, what: str) -> bytes:
        """The bytes of the file a config value names ('nemo:<name>' or a bare/absolute path whose
        base name is in the archive)."""
        name = os.path.basename(
            reference[len(ARTIFACT_PREFIX) :] if reference.startswith(ARTIFACT_PREFIX) else reference
        )
        if name not in self.artifacts:
            raise CheckpointError(f"{self.path}: {what} {reference!r} is not in the archive")
        return self.artifacts[name]


def find_checkpoint(ckpt_dir: str, checkpoint_name: str | None) -> str:
    """The `.nemo` file to load: `checkpoint_name` inside `ckpt_dir`, else the directory's only `.nemo`."""
    if checkpoint_name:
        path = os.path.join(ckpt_dir, checkpoint_name)
        if not os.path.isfile(path):
            raise CheckpointError(f"checkpoint {checkpoint_name!r} not found in {ckpt_dir!r}")
        return path
    found = sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".nemo"))
    if len(found) != 1:
        raise CheckpointError(
            f"{ckpt_dir!r} holds {len(found)} .nemo files ({', '.join(found) or 'none'}); "
            "name one with checkpoint_name"
        )
    return os.path.join(ckpt_dir, found[0])


def parse_yaml(data: bytes, path: str) -> dict[str, Any]:
    """model_config.yaml's mapping (`path` names the checkpoint in errors)."""
    try:
        config = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: {CONFIG_NAME} is not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: {CONFIG_NAME} is not a mapping")
    return config


def read_archive_config(path: str) -> dict[str, Any]:
    """model_config.yaml of a `.nemo`, its other members skipped unread (their headers only)."""
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if member.isfile() and os.path.basename(member.name) == CONFIG_NAME:
                    data = tar.extractfile(member)
                    assert data is not None  # regular files always extract
                    return parse_yaml(data.read(), path)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise CheckpointError(f"{path}: not a readable .nemo archive (truncated or corrupt?): {exc}") from exc
    raise CheckpointError(f"{path}: the archive has no {CONFIG_NAME} (truncated or not a NeMo checkpoint)")


def read_archive(path: str) -> NemoArchive:
    """Load config, weights and artifacts; a damaged or truncated file is a CheckpointError."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                if member.isfile():
                    data = tar.extractfile(member)
                    assert data is not None  # regular files always extract
                    members[os.path.basename(member.name)] = data.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise CheckpointError(f"{path}: not a readable .nemo archive (truncated or corrupt?): {exc}") from exc
    for required in (CONFIG_NAME, WEIGHTS_NAME):
        if required not in members:
            raise CheckpointError(
                f"{path}: the archive has no {required} (truncated or not a NeMo checkpoint); "
                f"found: {', '.join(sorted(members)) or 'nothing'}"
            )
    config = parse_yaml(members.pop(CONFIG_NAME), path)
    import torch

    try:
        state = torch.load(io.BytesIO(members.pop(WEIGHTS_NAME)), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for a damaged zip/pickle
        raise CheckpointError(
            f"{path}: {WEIGHTS_NAME} cannot be read (truncated or corrupt?): {exc}"
        ) from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: {WEIGHTS_NAME} is not a state dict of tensors")
    return NemoArchive(path=path, config=config, state_dict=state, artifacts=members)
