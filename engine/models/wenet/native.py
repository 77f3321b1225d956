"""OASR's own WeNet layout (`oasr convert`): the weights as safetensors with the CMVN folded in.

    oasr.json            {"format": "oasr", "version": 1, "family": "wenet", "source": "<weights file>"}
    train.yaml           as in the source
    units.txt            the source's symbol table
    model.safetensors    the state dict (WeNet's names), `encoder.global_cmvn.{mean,istd}` included

A WeNet `.pt` is a pickled zip whose CMVN lives in a separate text or JSON file that train.yaml
names by its training-time path; here the weights are memory-mapped with no unpickling and the
statistics travel inside them (the loader takes the state dict's CMVN over train.yaml's file).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from engine.errors import CheckpointError
from engine.models.wenet.config import (
    CONFIG_FILE,
    NATIVE_FORMAT,
    NATIVE_MANIFEST,
    NATIVE_WEIGHTS,
    UNITS_FILE,
    is_native,
)

MANIFEST, WEIGHTS = NATIVE_MANIFEST, NATIVE_WEIGHTS


def convert(ckpt_dir: str, checkpoint_name: str | None, out_dir: str) -> None:
    """Write the checkpoint in the native layout: the state dict as the loader reads it (CMVN
    folded in, no positional tables), train.yaml and units.txt beside it."""
    import torch
    from safetensors.torch import save_file

    from engine.models.wenet.checkpoint import load_checkpoint

    if is_native(ckpt_dir):
        raise CheckpointError(f"{ckpt_dir} is already in OASR's WeNet layout")
    ckpt = load_checkpoint(ckpt_dir, torch.device("cpu"), torch.float32, checkpoint_name)
    state = {k: v for k, v in ckpt.model.state_dict().items() if not k.endswith(".pe")}
    if ckpt.decoder is not None:
        state.update({f"decoder.{k}": v for k, v in ckpt.decoder.state_dict().items()})
    os.makedirs(out_dir, exist_ok=True)
    staging = tempfile.mkdtemp(dir=out_dir, prefix=".converting.")
    try:
        # clones: tied or sliced tensors share storage, which safetensors refuses to save
        save_file({k: v.detach().contiguous().clone() for k, v in state.items()}, os.path.join(staging, WEIGHTS),
                  metadata={"format": NATIVE_FORMAT})
        shutil.copyfile(os.path.join(ckpt_dir, CONFIG_FILE), os.path.join(staging, CONFIG_FILE))
        Path(staging, UNITS_FILE).write_text("".join(f"{u} {i}\n" for i, u in enumerate(ckpt.units)), encoding="utf-8")
        Path(staging, MANIFEST).write_text(json.dumps({"format": NATIVE_FORMAT, "version": 1, "family": "wenet",
                                                       "source": os.path.basename(ckpt.weights_path)}, indent=1) + "\n")
        for entry in sorted(os.listdir(staging), key=lambda n: n == MANIFEST):  # the manifest last
            os.replace(os.path.join(staging, entry), os.path.join(out_dir, entry))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


__all__ = ["MANIFEST", "WEIGHTS", "convert"]
