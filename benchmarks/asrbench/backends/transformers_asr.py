"""Hugging Face Transformers: `pipeline("automatic-speech-recognition")` in process on CPU;
the reference implementation for drift checks (`validate --reference`).

The model is `-o model=DIR`, else `$WHISPER_CKPT` when it names a Transformers directory,
else our embedded tiny.en written in Transformers format (peers/hf_whisper.py; cached, no
download). `-o model=` also takes a CTranslate2 or OpenAI directory, converted the same way.
Native batching is the pipeline's own (a list of inputs with `batch_size`); the pipeline
serves one call at a time, so concurrent kinds are unsupported.

Decoding defaults follow openai/whisper's `transcribe`, which our engine implements:
timestamp tokens on (`return_timestamps=True`; decoding without them changes the text of
some clips), greedy with temperature fallback, the compression-ratio, log-prob and no-speech
thresholds, previous-text prompts across windows (`openai_defaults`); English; greedy
(`beam_size=1`, passed explicitly: the ASR pipeline's own default is 5 beams, which is what
made its transcripts differ from ours on 7 of the 26 dev clips). Inputs over Whisper's 30 s window: with `chunk_length_s` the
pipeline transcribes overlapping chunks; without it (the default) Transformers' sequential
long-form generation runs (it requires timestamps). Such inputs go one per call.
"""

from __future__ import annotations

import os
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

WINDOW_S = 30.0
"""Whisper's input window; longer inputs need long-form generation."""
OPENAI_TRANSCRIBE = {
    "temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), "compression_ratio_threshold": 2.4, "logprob_threshold": -1.0,
    "no_speech_threshold": 0.6, "condition_on_prev_tokens": True,
}
"""openai/whisper `transcribe()` defaults, which our engine's DecodingOptions follow; Transformers'
generate defaults differ (no fallback, no thresholds, no previous-text prompts)."""
ONE_CALL = "the pipeline serves one call at a time (no concurrent requests); concurrency would be emulated"


class TransformersBackend(Backend):
    name = "transformers"
    summary = "Hugging Face Transformers ASR pipeline in process (the drift reference)"
    REQUIRES = "transformers"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "model": Option("", "model dir; default $WHISPER_CKPT, else the embedded tiny.en in Transformers format"),
        "dtype": Option("float32", "torch dtype of the model", ("float32", "bfloat16", "float16")),
        "batch_size": Option(16, "rows per forward in native batch calls"),
        "beam_size": Option(1, "beams (num_beams); 1 = greedy like our engine's default; the ASR pipeline's own "
                            "default is 5"),
        "chunk_length_s": Option(0.0, "chunked long-form window (s); 0 = bounded to one 30 s window"),
        "return_timestamps": Option(True, "decode with timestamp tokens, as openai/whisper's transcribe and our "
                                    "engine do (inputs over 30 s always need them)"),
        "openai_defaults": Option(True, "decode as openai/whisper's transcribe (and our engine) do: temperature "
                                  "fallback, compression/log-prob/no-speech thresholds, previous-text prompts"),
        "generate_kwargs": Option({}, "passed to generate (over the defaults), e.g. {language: en, task: transcribe}"),
        "num_threads": Option(0, "torch intra-op threads; 0 = torch default"),
    }

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self._pipe: Any = None
        self._lock = threading.Lock()
        self._model_dir = ""

    def capabilities(self) -> dict[str, Capability]:
        chunk = float(self.options["chunk_length_s"])
        return {
            "cold_start": supported(),
            "single": supported(),
            "batch": supported(f"pipeline batch_size={self.options['batch_size']}"),
            "throughput": unsupported(ONE_CALL),
            "load": unsupported(ONE_CALL),
            "longform": supported(f"chunked, chunk_length_s={chunk:g}") if chunk > 0 else supported(
                "sequential long-form generation (return_timestamps=True)"),
            "streaming": unsupported("the Transformers pipeline has no incremental streaming API"),
        }

    def start(self) -> None:
        gap = self.unavailable()
        if gap:
            raise BackendError(gap)
        import torch
        from transformers import pipeline

        from benchmarks.asrbench.peers.hf_whisper import transformers_model_dir

        if int(self.options["num_threads"]):
            torch.set_num_threads(int(self.options["num_threads"]))
        source = self.options["model"] or os.environ.get("WHISPER_CKPT", "").strip() or None
        self._model_dir = str(transformers_model_dir(source))
        kwargs: dict[str, Any] = {"model": self._model_dir, "device": "cpu",
                                  "dtype": getattr(torch, self.options["dtype"])}
        if float(self.options["chunk_length_s"]) > 0:
            kwargs["chunk_length_s"] = float(self.options["chunk_length_s"])
        self._pipe = pipeline("automatic-speech-recognition", **kwargs)

    def stop(self) -> None:
        self._pipe = None

    def _call(self, utts: list[Utterance]) -> list[str]:
        if self._pipe is None:
            raise BackendError("backend not started")
        sequential = float(self.options["chunk_length_s"]) <= 0
        long = [k for k, u in enumerate(utts) if sequential and u.duration_s > WINDOW_S]
        short = [k for k in range(len(utts)) if k not in long]
        texts: dict[int, str] = {}
        generate = dict(OPENAI_TRANSCRIBE) if self.options["openai_defaults"] else {}
        # Always explicit: the ASR pipeline otherwise decodes with 5 beams (its own default,
        # applied when the model's generation config names none), not the greedy search we compare.
        generate["num_beams"] = int(self.options["beam_size"])
        kwargs: dict[str, Any] = {"generate_kwargs": {**generate, **self.options["generate_kwargs"]}}
        with self._lock:
            if short:
                out = self._pipe([{"raw": utts[k].audio, "sampling_rate": 16_000} for k in short],
                                 batch_size=int(self.options["batch_size"]),
                                 return_timestamps=bool(self.options["return_timestamps"]), **kwargs)
                texts.update({k: str(o["text"]).strip() for k, o in zip(short, out, strict=True)})
            for k in long:
                out = self._pipe({"raw": utts[k].audio, "sampling_rate": 16_000}, return_timestamps=True, **kwargs)
                texts[k] = str(out["text"]).strip()
        return [texts[k] for k in range(len(utts))]

    def transcribe(self, utt: Utterance) -> str:
        return self._call([utt])[0]

    def transcribe_batch(self, utts: list[Utterance]) -> list[str]:
        return self._call(utts)

    def info(self) -> dict[str, Any]:
        from pathlib import Path

        from benchmarks.asrbench.peers.hf_whisper import describe

        return {"model_dir": self._model_dir, "transformers": metadata.version("transformers"),
                "torch": metadata.version("torch"), **({"converted_from": describe(Path(self._model_dir))}
                                                       if self._model_dir else {})}
