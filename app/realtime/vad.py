"""The server's one voice-activity model, loaded on first use and shared by every surface
(realtime server VAD, `chunking_strategy` segmentation). Silero keeps per-stream state
outside the model, so one instance serves all streams."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from engine.vad import VoiceActivityModel, load_vad_model

logger = logging.getLogger(__name__)


class VadModelCache:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.error: str | None = None
        """Why the model could not be loaded (then every caller gets None without retrying)."""
        self._model: VoiceActivityModel | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def of(cls, state: Any) -> VadModelCache:
        """The app's cache (created on first use), for the `--vad` model kind in its settings."""
        cache: VadModelCache | None = getattr(state, "vad_models", None)
        if cache is None:
            cache = cls(state.settings.vad)
            state.vad_models = cache
        return cache

    async def get(self) -> VoiceActivityModel | None:
        async with self._lock:
            if self._model is None and self.error is None:
                try:
                    self._model = await asyncio.to_thread(load_vad_model, self.kind)
                except Exception as exc:  # a broken install must not take the server down
                    self.error = f"{type(exc).__name__}: {exc}"
                    logger.error("VAD model %r unavailable: %s", self.kind, self.error)
            return self._model
