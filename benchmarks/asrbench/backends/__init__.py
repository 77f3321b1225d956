"""Backend registry: name -> class, imported lazily so a missing optional dependency only
breaks the backend that needs it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from benchmarks.asrbench.errors import BackendError

if TYPE_CHECKING:
    from benchmarks.asrbench.backends.base import Backend

_REGISTRY = {
    "mock": ("benchmarks.asrbench.backends.mock", "MockBackend"),
    "faster_whisper": ("benchmarks.asrbench.backends.faster_whisper", "FasterWhisperBackend"),
    "oasr_engine": ("benchmarks.asrbench.backends.oasr_engine", "OasrEngineBackend"),
    "oasr_server": ("benchmarks.asrbench.backends.oasr_server", "OasrServerBackend"),
    "openai_http": ("benchmarks.asrbench.backends.openai_http", "OpenAIHttpBackend"),
    "transformers": ("benchmarks.asrbench.backends.transformers_asr", "TransformersBackend"),
    "whisper_cpp": ("benchmarks.asrbench.backends.whisper_cpp", "WhisperCppBackend"),
}
PEER = "faster_whisper"
"""The backend reports compute ratios against."""


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> type[Backend]:
    if name not in _REGISTRY:
        raise BackendError(f"unknown backend {name!r}; known: {names()}")
    module, cls = _REGISTRY[name]
    backend_cls: type[Backend] = getattr(importlib.import_module(module), cls)
    return backend_cls


def create(name: str, option_pairs: list[str]) -> Backend:
    cls = get(name)
    return cls(cls.parse_options(option_pairs))
