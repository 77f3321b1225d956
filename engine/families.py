"""The model families this engine can load: one line each in `FAMILY_TABLE`.

A family is a package under `engine/models/` whose `__init__` exposes `FAMILY`, a `ModelFamily`:
how to recognise its checkpoints, how to build its runner, and the frozen dataclass of its
options. Packages are imported only when the table is consulted, and importing one registers
nothing: the table is the whole list. Adding a family touches its own folder, its line here and
`tests/engine/test_family_contract.py`.

Detection is by checkpoint contents: the first family (in table order) whose `detect` accepts
the directory wins, so a family with a more specific signature goes first.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from engine.config import EngineConfig
from engine.errors import CheckpointError, InvalidRequestError, UnsupportedError
from engine.runner import ModelInfo, ModelRunner


@dataclass(frozen=True)
class ModelFamily:
    name: str
    detect: Callable[[str, str | None], bool]
    """(ckpt_dir, checkpoint_name) -> True when the directory holds this family's checkpoint
    (`checkpoint_name`, when given, is the file inside the directory to load)."""
    build: Callable[[EngineConfig, Any], ModelRunner]
    """(config, options) -> the runner, loaded and ready; `options` is an instance of `options`."""
    options: type
    """Frozen dataclass of the family's own knobs; its defaults are the family's defaults."""
    online_quantization: tuple[str, ...] = ()
    """Quantization schemes the family applies to its layers at load (e.g. 'int8_w8a8'). Another
    explicit scheme is refused before loading; 'auto' then means the float type."""
    convert: Callable[[str, str | None, str], None] | None = None
    """(ckpt_dir, checkpoint_name, out_dir) -> writes the checkpoint in the layout this family loads
    fastest (`oasr convert`); None when the family has no such layout."""
    quantize: Callable[[str, str | None, str, Any], None] | None = None
    """(ckpt_dir, checkpoint_name, out_dir, QuantizationConfig) -> writes quantized weights that load
    with no quantization work (`oasr quantize`); None when the family cannot."""
    not_converted: str = ""
    """Why the family has no `convert` (the refusal says it): e.g. its checkpoints already load as
    one memory-mapped file."""
    not_quantized: str = ""
    """Why the family has no `quantize` (the refusal says it): e.g. it computes in float only."""
    describe: Callable[[EngineConfig, Any], ModelInfo] | None = None
    """(config, options) -> the `ModelInfo` the built runner's `info()` would give, read from the
    checkpoint's configuration files only (no weights read, no module built): /v1/models shows a
    model's capabilities before its first load. `parameters` is 0 and `details` holds only facts
    the configuration gives, each equal to the loaded runner's (tests/engine/test_family_contract.py).
    None: known only once loaded."""
    hub_files: tuple[str, ...] = ()
    """Globs (fnmatch, relative to a model repo's root) of the files this family loads: a model named
    by repo id downloads only files some family loads (engine/hub.py), never a repo's other formats."""


@dataclass(frozen=True)
class FamilyEntry:
    name: str
    module: str
    """Package whose `FAMILY` is this family (imported on first use)."""


FAMILY_TABLE: tuple[FamilyEntry, ...] = (
    FamilyEntry("paraformer", "engine.models.paraformer"),  # before whisper, which takes any lone .pt
    FamilyEntry("zipformer", "engine.models.zipformer"),  # before whisper, whose detect takes any lone .pt
    FamilyEntry("whisper", "engine.models.whisper"),
    FamilyEntry("wenet", "engine.models.wenet"),
    FamilyEntry("nemo", "engine.models.nemo"),
    FamilyEntry("speechllm", "engine.models.speechllm"),
    FamilyEntry("fake", "engine.models.fake"),
)


@cache
def load_family(name: str) -> ModelFamily:
    entry = next((e for e in FAMILY_TABLE if e.name == name), None)
    if entry is None:
        raise KeyError(f"unknown model family {name!r} (known: {', '.join(family_names())})")
    family = importlib.import_module(entry.module).FAMILY
    if not isinstance(family, ModelFamily) or family.name != name:
        raise TypeError(f"{entry.module}.FAMILY must be ModelFamily(name={name!r}, ...), got {family!r}")
    if not (dataclasses.is_dataclass(family.options) and family.options.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise TypeError(f"family {name!r}: options must be a frozen dataclass, got {family.options!r}")
    return family


def check_quantization(family: ModelFamily, config: EngineConfig) -> None:
    """Refuse a layer quantization scheme the family does not apply (fp16/bf16, float types, and
    'auto'/'none' are every family's)."""
    scheme = config.quantization_config().scheme
    if scheme not in ("auto", "none", "fp16", "bf16") and scheme not in family.online_quantization:
        raise UnsupportedError(
            f"quantization {scheme!r} is not offered by {family.name} models "
            f"(they offer: {', '.join(('none', 'fp16', 'bf16', *family.online_quantization))})")


def family_names() -> tuple[str, ...]:
    return tuple(e.name for e in FAMILY_TABLE)


def resolve_family(ckpt_dir: str, checkpoint_name: str | None = None) -> ModelFamily:
    """The family whose checkpoint `ckpt_dir` holds (CheckpointError when none does)."""
    if checkpoint_name is not None:
        if os.path.basename(checkpoint_name) != checkpoint_name or checkpoint_name in ("", ".", ".."):
            raise InvalidRequestError(f"checkpoint_name must be a file name inside ckpt_dir, got {checkpoint_name!r}")
        if not os.path.isfile(os.path.join(ckpt_dir, checkpoint_name)):
            raise CheckpointError(f"checkpoint_name {checkpoint_name!r} is not a file in {ckpt_dir!r}")
    for entry in FAMILY_TABLE:
        family = load_family(entry.name)
        if family.detect(ckpt_dir, checkpoint_name):
            return family
    raise CheckpointError(
        f"no model family recognises checkpoint directory {ckpt_dir!r}"
        + (f" with checkpoint_name={checkpoint_name!r}" if checkpoint_name else "")
        + f" (known: {', '.join(family_names())})"
    )


def _set_fields(options: Any) -> set[str]:
    """Fields of an options instance that differ from the class default (set by the caller)."""
    default = type(options)()
    return {f.name for f in dataclasses.fields(options) if getattr(options, f.name) != getattr(default, f.name)}


def family_options(family: ModelFamily, given: Mapping[str, object],
                   aliased: Mapping[str, object] | None = None) -> Any:
    """The family's options instance from `EngineConfig.family_options[family.name]`: an instance
    of its options class, a mapping of field values (unknown keys are refused), or absent.
    Entries keyed by anything but a family name are refused too: an option given without its
    family (`{"offline_encoder_context": ...}`) would otherwise be ignored silently."""
    strays = sorted(set(given) - set(family_names()))
    if strays:
        raise InvalidRequestError(
            f"family_options is keyed by family name ({', '.join(family_names())}); got {', '.join(map(repr, strays))}"
        )
    value = given.get(family.name)
    if aliased:
        if value is None or isinstance(value, Mapping):
            value = {**aliased, **(value or {})}  # the family's own entry wins over a deprecated alias
        elif isinstance(value, family.options):
            value = dataclasses.replace(value, **{k: v for k, v in aliased.items() if k not in _set_fields(value)})
    if value is None:
        return family.options()
    if isinstance(value, family.options):
        return value
    if isinstance(value, Mapping):
        known = {f.name for f in dataclasses.fields(family.options)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise InvalidRequestError(
                f"unknown {family.name} option(s) {', '.join(unknown)} (known: {', '.join(sorted(known)) or 'none'})"
            )
        return family.options(**value)
    raise InvalidRequestError(
        f"family_options[{family.name!r}] must be {family.options.__name__} or a mapping, got {type(value).__name__}"
    )


__all__ = ["FAMILY_TABLE", "FamilyEntry", "ModelFamily", "check_quantization", "family_names", "family_options",
           "load_family", "resolve_family"]
