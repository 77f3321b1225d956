"""whisper.cpp through its maintained Python binding `pywhispercpp`, in process on CPU.

There is no ggml model on disk and nothing may be downloaded, so by default our embedded
tiny.en is written as a ggml file (peers/ggml_whisper.py, cached); `-o model=` takes a ggml
file or any checkpoint directory our loader reads. Decoding is greedy, English, without
timestamps in the text, like our engine's defaults. One whisper.cpp context serves one call
at a time and its API takes one input per call: batch, throughput and load are unsupported.
"""

from __future__ import annotations

import threading
from importlib import metadata
from typing import Any, ClassVar

from benchmarks.asrbench.backends.base import (
    Backend,
    BackendError,
    Capability,
    Option,
    Utterance,
    supported,
    unsupported,
)

ONE_CALL = "one whisper.cpp context serves one call at a time; concurrency would be emulated"


class WhisperCppBackend(Backend):
    name = "whisper_cpp"
    summary = "whisper.cpp via pywhispercpp in process on CPU (our weights written as ggml)"
    REQUIRES = "pywhispercpp"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "model": Option("", "ggml file or checkpoint dir; empty = the embedded tiny.en written as ggml"),
        "n_threads": Option(0, "whisper.cpp threads; 0 = its default"),
    }

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self._model: Any = None
        self._file = ""
        self._lock = threading.Lock()

    def capabilities(self) -> dict[str, Capability]:
        return {
            "cold_start": supported(),
            "single": supported(),
            "batch": unsupported("whisper.cpp's API transcribes one input per call"),
            "throughput": unsupported(ONE_CALL),
            "load": unsupported(ONE_CALL),
            "longform": supported("whisper.cpp's own 30 s sliding window"),
            "streaming": unsupported("pywhispercpp has no incremental streaming API"),
        }

    def start(self) -> None:
        gap = self.unavailable()
        if gap:
            raise BackendError(gap)
        from pywhispercpp.model import Model

        from benchmarks.asrbench.peers.ggml_whisper import ggml_model_file

        self._file = str(ggml_model_file(self.options["model"] or None))
        params: dict[str, Any] = {"language": "en", "print_progress": False, "print_realtime": False,
                                  "no_timestamps": True}
        if int(self.options["n_threads"]):
            params["n_threads"] = int(self.options["n_threads"])
        self._model = Model(self._file, redirect_whispercpp_logs_to=None, **params)

    def stop(self) -> None:
        self._model = None

    def transcribe(self, utt: Utterance) -> str:
        if self._model is None:
            raise BackendError("backend not started")
        with self._lock:
            segments = self._model.transcribe(utt.audio)
        return " ".join(s.text.strip() for s in segments).strip()

    def info(self) -> dict[str, Any]:
        return {"model_file": self._file, "pywhispercpp": metadata.version("pywhispercpp")}
