"""OASR engine: a PyTorch speech-recognition core with a vLLM-style step loop.

Waveform in (float32 mono at the model rate), `RequestOutput`s out. No web framework,
grpc or pydantic imports here: the serving layer lives in `app/`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.config import EngineConfig
from engine.errors import (
    CheckpointError,
    EngineError,
    EngineOverloadedError,
    EngineShutdownError,
    InvalidRequestError,
    UnknownRequestError,
    UnsupportedError,
)
from engine.types import Alternative, DecodingOptions, RequestOutput, Segment, Word

if TYPE_CHECKING:
    from engine.engine import ASREngine

__all__ = [
    "ASREngine",
    "Alternative",
    "CheckpointError",
    "DecodingOptions",
    "EngineConfig",
    "EngineError",
    "EngineOverloadedError",
    "EngineShutdownError",
    "InvalidRequestError",
    "RequestOutput",
    "Segment",
    "UnknownRequestError",
    "UnsupportedError",
    "Word",
]


def __getattr__(name: str) -> Any:
    # ASREngine pulls in torch; importing the wire types alone should stay cheap.
    if name == "ASREngine":
        from engine.engine import ASREngine

        return ASREngine
    raise AttributeError(name)
