"""OASR's own NeMo layout: a `.nemo` unpacked once (`oasr convert`), so a start reads no tar.

    oasr.json                  {"format": "oasr", "version": 1, "family": "nemo", "name": "<the .nemo's stem>"}
    model_config.yaml          as in the archive
    model_weights.safetensors  the archive's state dict, NeMo's names (checkpoint.py maps them at load)
    <artifacts>                every other file of the archive, by base name (the SentencePiece model, ...)

A `.nemo` is a tar whose weights are a pickled zip: reading one decompresses and copies every
tensor (seconds for a 0.6B model); here the weights are memory-mapped from safetensors.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from engine.errors import CheckpointError
from engine.models.nemo.archive import CONFIG_NAME, NemoArchive, find_checkpoint, read_archive

MANIFEST = "oasr.json"
WEIGHTS = "model_weights.safetensors"
FORMAT, VERSION = "oasr", 1


def is_native(ckpt_dir: str) -> bool:
    path = os.path.join(ckpt_dir, MANIFEST)
    if not os.path.isfile(path):
        return False
    try:
        with open(path) as f:
            return bool(json.load(f).get("family") == "nemo")
    except (OSError, ValueError):
        return False


def read_config(ckpt_dir: str) -> tuple[str, dict[str, Any]]:
    """(the path naming the checkpoint, as the `.nemo`'s did, in logs and /v1/models; its
    model_config.yaml), from the manifest and the config file only."""
    with open(os.path.join(ckpt_dir, MANIFEST)) as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(f"{ckpt_dir}/{MANIFEST}: format {manifest.get('format')!r} version "
                              f"{manifest.get('version')!r} is not {FORMAT!r} version {VERSION}")
    try:
        config = yaml.safe_load(Path(ckpt_dir, CONFIG_NAME).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CheckpointError(f"{ckpt_dir}: unreadable unpacked NeMo checkpoint ({exc})") from exc
    return os.path.join(ckpt_dir, f"{manifest.get('name', 'model')}.nemo"), config


def read(ckpt_dir: str) -> NemoArchive:
    """The unpacked archive, as `archive.read_archive` returns a packed one."""
    from safetensors.torch import load_file

    path, config = read_config(ckpt_dir)
    try:
        state_dict = load_file(os.path.join(ckpt_dir, WEIGHTS))
    except OSError as exc:
        raise CheckpointError(f"{ckpt_dir}: unreadable unpacked NeMo checkpoint ({exc})") from exc
    except Exception as exc:  # safetensors' own error types for a damaged header
        raise CheckpointError(f"{ckpt_dir}/{WEIGHTS}: not a readable safetensors file ({exc})") from exc
    artifacts = {name: Path(ckpt_dir, name).read_bytes() for name in os.listdir(ckpt_dir)
                 if name not in (MANIFEST, CONFIG_NAME, WEIGHTS) and os.path.isfile(os.path.join(ckpt_dir, name))}
    return NemoArchive(path=path, config=config, state_dict=state_dict, artifacts=artifacts)


def convert(ckpt_dir: str, checkpoint_name: str | None, out_dir: str) -> None:
    """Unpack the `.nemo` into `out_dir` (config, weights as safetensors, artifacts)."""
    from safetensors.torch import save_file

    archive = read(ckpt_dir) if is_native(ckpt_dir) else read_archive(find_checkpoint(ckpt_dir, checkpoint_name))
    os.makedirs(out_dir, exist_ok=True)
    staging = tempfile.mkdtemp(dir=out_dir, prefix=".unpacking.")
    try:
        with open(os.path.join(staging, CONFIG_NAME), "w") as f:
            yaml.safe_dump(archive.config, f, sort_keys=False)
        # clones: tied or sliced tensors share storage, which safetensors refuses to save
        save_file({k: v.detach().contiguous().clone() for k, v in archive.state_dict.items()},
                  os.path.join(staging, WEIGHTS), metadata={"format": FORMAT})
        for name, data in archive.artifacts.items():
            Path(staging, name).write_bytes(data)
        name = os.path.splitext(os.path.basename(archive.path))[0]
        Path(staging, MANIFEST).write_text(json.dumps({"format": FORMAT, "version": VERSION, "family": "nemo",
                                                       "name": name}, indent=1) + "\n")
        for entry in sorted(os.listdir(staging), key=lambda n: n == MANIFEST):  # the manifest last
            os.replace(os.path.join(staging, entry), os.path.join(out_dir, entry))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


__all__ = ["MANIFEST", "WEIGHTS", "convert", "is_native", "read", "read_config"]
