"""`oasr convert` / `oasr quantize` for any family: resolve the source (a directory, a checkpoint
file inside one, or a model name), detect its family as the family table does, and let the family
write its native layout (`ModelFamily.convert` / `ModelFamily.quantize`)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from engine.errors import InvalidRequestError, UnsupportedError
from engine.families import ModelFamily, family_names, load_family, resolve_family
from engine.quantization import QuantizationConfig

logger = logging.getLogger(__name__)

NATIVE_MANIFEST = "oasr.json"
"""Every native layout carries it; an output directory holding one may be written over."""


@dataclass(frozen=True)
class Converted:
    family: str
    out_dir: str


def source_dir(src: str, revision: str | None = None) -> tuple[str, str | None]:
    """(checkpoint directory, checkpoint file name or None) for a directory, a file inside one
    (`model.nemo`, `tiny.en.pt`) or a model name (downloaded, engine/hub.py)."""
    if os.path.isfile(src):
        return os.path.dirname(os.path.abspath(src)), os.path.basename(src)
    from engine.hub import checkpoint_dir

    resolved = checkpoint_dir(src, revision)
    assert resolved is not None
    return resolved, None


def _check_out_dir(src_dir: str, out_dir: str) -> None:
    if os.path.realpath(src_dir) == os.path.realpath(out_dir):
        raise InvalidRequestError(f"the output directory {out_dir!r} is the source: write the conversion elsewhere")
    if os.path.isfile(out_dir):
        raise InvalidRequestError(f"the output {out_dir!r} is a file; give a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not os.path.isfile(os.path.join(out_dir, NATIVE_MANIFEST)):
        raise InvalidRequestError(f"the output directory {out_dir!r} is not empty (and holds no earlier conversion)")


def _family(src_dir: str, checkpoint_name: str | None, what: str, offered: list[str]) -> ModelFamily:
    family = resolve_family(src_dir, checkpoint_name)
    if getattr(family, what) is None:
        why = family.not_converted if what == "convert" else family.not_quantized
        raise UnsupportedError(f"{family.name} checkpoints have no `oasr {what}`" + (f": {why}" if why else "")
                               + f" (offered for: {', '.join(offered)})")
    return family


def convert_checkpoint(src: str, out_dir: str, revision: str | None = None) -> Converted:
    """Write `src` in its family's native layout to `out_dir`."""
    src_dir, name = source_dir(src, revision)
    _check_out_dir(src_dir, out_dir)
    family = _family(src_dir, name, "convert", [n for n in family_names() if load_family(n).convert])
    assert family.convert is not None
    family.convert(src_dir, name, out_dir)
    return Converted(family.name, out_dir)


def quantize_checkpoint(src: str, out_dir: str, quantization: QuantizationConfig,
                        revision: str | None = None) -> Converted:
    """Write `src` with its layers quantized ahead of time to `out_dir`."""
    src_dir, name = source_dir(src, revision)
    _check_out_dir(src_dir, out_dir)
    family = _family(src_dir, name, "quantize", [n for n in family_names() if load_family(n).quantize])
    assert family.quantize is not None
    family.quantize(src_dir, name, out_dir, quantization)
    return Converted(family.name, out_dir)


__all__ = ["Converted", "convert_checkpoint", "quantize_checkpoint", "source_dir"]
