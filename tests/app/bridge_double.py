"""A scripted stand-in for `EngineService` at the seam the live surfaces use (open_request, feed,
close, sample_rate, engine.model_info, engine.validate_options): the test plays the engine by putting
outputs into each request's real `OutputStream`, and reads back what was fed and closed."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.engine_metrics import EngineSeries
from app.metrics import Metrics
from app.output_stream import OutputStream
from engine import DecodingOptions
from engine.capabilities import Capabilities, check_capabilities
from engine.runner import ModelInfo


class ScriptedService:
    def __init__(self, sample_rate: int = 16000) -> None:
        self.metrics = Metrics()
        self.sample_rate = sample_rate
        self.series = EngineSeries(self.metrics, "scripted", "scripted")
        info = ModelInfo("scripted", "scripted-en", sample_rate, ("en",),
                         capabilities=Capabilities(keywords=True, word_timestamps=True, logprobs=True))
        self.engine = type("E", (), {"model_info": info,
                                     "validate_options": self.validate_options})()
        self.streams: dict[str, OutputStream] = {}
        self.fed: dict[str, list[tuple[int, bool]]] = {}
        self.closed: list[str] = []
        self.refuse: Exception | None = None
        """Raised by open_request while set (an engine refusing new requests)."""

    def validate_options(self, options: DecodingOptions | None, streaming: bool = False) -> DecodingOptions:
        """The engine's own admission checks against the scripted model's capabilities."""
        options = options or DecodingOptions()
        options.validate()
        info = self.engine.model_info
        check_capabilities(info.capabilities, family=info.family, model=info.model, languages=info.languages,
                           options=options)
        return options

    def open_request(self, audio: Any, *, streaming: bool, decoding: Any) -> OutputStream:
        if self.refuse is not None:
            raise self.refuse
        rid = f"req-{len(self.streams)}"
        self.streams[rid] = OutputStream(rid)
        self.fed[rid] = []
        return self.streams[rid]

    def feed(self, rid: str, chunk: np.ndarray, is_last: bool = False) -> None:
        self.fed[rid].append((chunk.size, is_last))

    def close(self, rid: str) -> None:
        self.closed.append(rid)
