"""OASR's own Whisper layout: the directory `oasr convert` and `oasr quantize` write, and the one
the engine loads fastest.

    oasr.json            {"format": "oasr", "version": 1, "family": "whisper", "dims": {...},
                          "alignment_heads": [...], "suppress_ids": [...], "suppress_ids_begin": [...],
                          "lang_ids": [...], "source_format": "ctranslate2", "quantization": null | {...}}
    model.safetensors    the state dict in openai/whisper's parameter names, float32
    tokenizer.json       copied from the source

Why this layout: every other format costs work at each start. A CTranslate2 `model.bin` is parsed
and every float16 tensor widened (0.85-1.4 s for tiny.en on a loaded 2-core VM, weights_cache.py);
an OpenAI `.pt` is unpickled into memory; a Transformers directory is renamed tensor by tensor. Here
the tensors already carry the names and the float type the model uses, and safetensors maps them
from the file, so the model is built around them with no copy (build.py `_holding`).

A quantized directory (`oasr quantize`) holds each quantized linear layer as `<path>.weight_int8`
(int8, (N, K)) + `<path>.weight_scale` (float32, (N,)) + `<path>.bias`, the logits projection as
`decoder.output_projection.*`, and in oasr.json
`"quantization": {"scheme": "int8_w8a8", "weight_max": 127 | 63, "ignore": [...]}`: `weight_max`
is the weight range the quantizing machine's int8 GEMM sums exactly (int8.py), which a loading
machine must also sum exactly.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from torch import Tensor

from engine.errors import CheckpointError
from engine.models.whisper.model import WhisperDims

logger = logging.getLogger(__name__)

MANIFEST = "oasr.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
FORMAT = "oasr"
VERSION = 1
"""Bumped when the layout changes incompatibly; a reader refuses versions it does not know."""


@dataclasses.dataclass(frozen=True)
class NativeQuantization:
    scheme: str
    """'int8_w8a8'."""
    weight_max: int
    """The int8 weights' range, [-weight_max, weight_max] (127, or 63 where the quantizing CPU's
    int8 GEMM saturates full-range products; int8.py)."""
    ignore: tuple[str, ...] = ()
    """Module-path globs kept in full precision when it was quantized."""


def is_native(ckpt_dir: str) -> bool:
    """Whether `ckpt_dir` holds a Whisper model in this layout (oasr.json naming the whisper family)."""
    path = os.path.join(ckpt_dir, MANIFEST)
    if not os.path.isfile(path):
        return False
    try:
        return bool(read_manifest(ckpt_dir).get("family") == "whisper")
    except CheckpointError:
        return True  # ours, but damaged: loading reports what is wrong


def read_manifest(ckpt_dir: str) -> dict[str, Any]:
    path = os.path.join(ckpt_dir, MANIFEST)
    try:
        with open(path) as f:
            manifest: dict[str, Any] = json.load(f)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable OASR manifest ({exc})") from exc
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(f"{path}: format {manifest.get('format')!r} version {manifest.get('version')!r} "
                              f"is not {FORMAT!r} version {VERSION} (written by a newer OASR?)")
    return manifest


def manifest_quantization(manifest: dict[str, Any]) -> NativeQuantization | None:
    q = manifest.get("quantization")
    if q is None:
        return None
    return NativeQuantization(scheme=str(q["scheme"]), weight_max=int(q["weight_max"]),
                              ignore=tuple(q.get("ignore", ())))


def write(out_dir: str, dims: WhisperDims, state_dict: dict[str, Tensor], tokenizer_file: str, *,
          alignment_heads: list[tuple[int, int]], suppress_ids: list[int] | None,
          suppress_ids_begin: list[int] | None, lang_ids: list[int] | None, source_format: str,
          quantization: NativeQuantization | None = None) -> None:
    """Write the layout into `out_dir` (created; files already there with these names are replaced).
    Each file is written beside its final name and renamed, so a reader never sees half of one."""
    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)
    manifest = {
        "format": FORMAT, "version": VERSION, "family": "whisper", "dims": dataclasses.asdict(dims),
        "alignment_heads": [list(h) for h in alignment_heads], "suppress_ids": suppress_ids,
        "suppress_ids_begin": suppress_ids_begin, "lang_ids": lang_ids, "source_format": source_format,
        "quantization": None if quantization is None else {
            "scheme": quantization.scheme, "weight_max": quantization.weight_max, "ignore": list(quantization.ignore)},
    }
    # clones: split projections are views of one fused tensor, which safetensors refuses to save
    tensors = {k: v.detach().contiguous().clone() for k, v in state_dict.items()}
    _replace(out_dir, WEIGHTS, lambda tmp: save_file(tensors, tmp, metadata={"format": FORMAT}))
    _replace(out_dir, TOKENIZER, lambda tmp: shutil.copyfile(tokenizer_file, tmp))
    # the manifest last: a directory with a manifest is complete
    _replace(out_dir, MANIFEST, lambda tmp: Path(tmp).write_text(json.dumps(manifest, indent=1) + "\n"))


def _replace(out_dir: str, name: str, write_to: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    try:
        write_to(tmp)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from a server running as another user
        os.replace(tmp, os.path.join(out_dir, name))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read(ckpt_dir: str) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The manifest and the state dict (memory-mapped from the file, no copy)."""
    from safetensors.torch import load_file

    manifest = read_manifest(ckpt_dir)
    path = os.path.join(ckpt_dir, WEIGHTS)
    try:
        state_dict = load_file(path)
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from exc
    return manifest, state_dict


__all__ = ["MANIFEST", "TOKENIZER", "WEIGHTS", "NativeQuantization", "is_native", "manifest_quantization",
           "read", "read_manifest", "write"]
