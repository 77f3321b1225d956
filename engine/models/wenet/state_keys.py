"""The names in a `.pt` state dict, read without torch and without reading a tensor.

`torch.save` pickles the dict with each tensor's bytes stored apart: in a zip member per storage
(the format since torch 1.6), or after the pickle (the legacy format). Unpickling the dict's
structure alone, with every tensor, storage and foreign object stood in for by a placeholder,
gives its keys; nothing but plain containers is ever built, so this is safe on any file.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from typing import IO, Any

from engine.errors import CheckpointError

WRAPPERS = ("model", "state_dict")
"""Keys some exports nest the state dict under."""
_CONTAINERS: dict[tuple[str, str], type] = {("collections", "OrderedDict"): OrderedDict, ("builtins", "dict"): dict}


class _Placeholder:
    """Whatever the pickle builds that is not a plain container (a tensor, a storage, an object)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        pass

    def __setitem__(self, key: object, value: object) -> None:
        pass

    def append(self, value: object) -> None:
        pass

    def extend(self, values: object) -> None:
        pass


class _Structure(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _CONTAINERS.get((module, name), _Placeholder)

    def persistent_load(self, pid: object) -> object:
        return _Placeholder()


def _load(f: IO[bytes]) -> Any:
    return _Structure(f, encoding="utf-8").load()


def read_structure(path: str) -> Any:
    """The object `torch.load(path)` would return, tensors replaced by placeholders."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                name = next((n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl")), None)
                if name is None:
                    raise CheckpointError(f"{path}: a zip without data.pkl is not a torch checkpoint")
                return _load(io.BytesIO(z.read(name)))
        with open(path, "rb") as f:  # legacy: magic number, protocol, system info, then the object
            for _ in range(3):
                _load(f)
            return _load(f)
    except (OSError, pickle.UnpicklingError, EOFError, zipfile.BadZipFile, ValueError, TypeError) as exc:
        raise CheckpointError(f"cannot read state dict {path!r}: {exc}") from exc


def state_dict_keys(path: str) -> list[str]:
    """The keys of the state dict saved at `path` (inside one of `WRAPPERS`, when nested so), as
    the loader names them (without DataParallel's 'module.')."""
    obj = read_structure(path)
    for wrapper in WRAPPERS:
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            obj = obj[wrapper]
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a state dict of tensors")
    return [str(k).removeprefix("module.") for k in obj]
