"""The in-process engine under the reference design's import path: `from oasr.engine import
ASREngine, EngineConfig, DecodingOptions` (its engine document, §7 usage), the same objects as
`engine`'s. Importing it loads the engine (PyTorch); `import oasr` (the clients) does not."""

from engine import (
    Alternative,
    CheckpointError,
    DecodingOptions,
    EngineConfig,
    EngineError,
    EngineOverloadedError,
    EngineShutdownError,
    InvalidRequestError,
    RequestOutput,
    Segment,
    UnknownRequestError,
    UnsupportedError,
    Word,
)
from engine.engine import ASREngine

__all__ = ["ASREngine", "Alternative", "CheckpointError", "DecodingOptions", "EngineConfig", "EngineError",
           "EngineOverloadedError", "EngineShutdownError", "InvalidRequestError", "RequestOutput", "Segment",
           "UnknownRequestError", "UnsupportedError", "Word"]
