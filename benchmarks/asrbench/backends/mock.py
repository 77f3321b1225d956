"""A simulated backend: sleeps a latency model instead of recognizing speech.

It exists to test the suite itself (fast, deterministic workloads, no model). Everything it
produces is flagged `simulated: true`. Its "transcript" is the reference text with seeded
word substitutions, so accuracy plumbing is exercised too.

`ASRBENCH_TEST_STEP_DELAY_MS` adds a sleep to every simulated step; it is read here only,
by the suite's tests, to produce a deliberately slowed candidate.
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from typing import Any, ClassVar

import numpy as np

from benchmarks.asrbench.backends.base import (
    KINDS,
    Backend,
    Capability,
    Option,
    StreamSession,
    Utterance,
    supported,
)

STEP_DELAY_ENV = "ASRBENCH_TEST_STEP_DELAY_MS"
STEP_AUDIO_S = 1.0
"""Seconds of audio one simulated step advances (offline); streams step per partial."""


class MockBackend(Backend):
    name = "mock"
    summary = "simulated latencies for testing the suite (flagged simulated in every output)"
    simulated = True
    OPTIONS: ClassVar[dict[str, Option]] = {
        "rtfx": Option(50.0, "simulated speed: audio seconds processed per compute second"),
        "base_ms": Option(3.0, "fixed per-request overhead (ms)"),
        "jitter": Option(0.05, "relative uniform jitter on every sleep"),
        "slots": Option(4, "requests the simulated engine serves at once; more queue"),
        "batch_scaling": Option(0.25, "extra cost of each additional batch row, relative to one row"),
        "load_ms": Option(20.0, "simulated model load time (ms)"),
        "partial_ms": Option(200, "streaming: audio (ms) between partial results"),
        "error_rate": Option(0.05, "fraction of words substituted in transcripts"),
        "seed": Option(0, "seed of jitter and substitutions"),
    }

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.step_delay_ms = float(os.environ.get(STEP_DELAY_ENV, "0") or 0)
        self._slots = threading.Semaphore(int(options["slots"]))
        self._rng = random.Random(int(options["seed"]))
        self._lock = threading.Lock()

    def capabilities(self) -> dict[str, Capability]:
        return {k: supported("simulated") for k in KINDS}

    def start(self) -> None:
        self._sleep(self.options["load_ms"])

    def _sleep(self, ms: float) -> None:
        with self._lock:
            factor = 1.0 + self._rng.uniform(-1, 1) * float(self.options["jitter"])
        time.sleep(max(ms, 0.0) * factor / 1000.0)

    def _step_ms(self, audio_s: float, rows: int = 1) -> float:
        compute = audio_s * 1000.0 / float(self.options["rtfx"])
        return compute * (1.0 + float(self.options["batch_scaling"]) * (rows - 1)) + self.step_delay_ms

    def _hypothesis(self, reference: str, upto: float = 1.0) -> str:
        words = reference.split()
        words = words[: max(0, math.ceil(len(words) * upto))]
        # Deterministic per reference: the same clip always gets the same substitutions.
        rng = random.Random(f"{self.options['seed']}:{reference}")
        return " ".join("mock" if rng.random() < float(self.options["error_rate"]) else w for w in words)

    def transcribe(self, utt: Utterance) -> str:
        with self._slots:
            self._sleep(float(self.options["base_ms"]))
            for _ in range(max(1, math.ceil(utt.duration_s / STEP_AUDIO_S))):
                self._sleep(self._step_ms(STEP_AUDIO_S))
        return self._hypothesis(utt.text)

    def transcribe_batch(self, utts: list[Utterance]) -> list[str]:
        longest = max(u.duration_s for u in utts)
        with self._slots:
            self._sleep(float(self.options["base_ms"]))
            for _ in range(max(1, math.ceil(longest / STEP_AUDIO_S))):
                self._sleep(self._step_ms(STEP_AUDIO_S, rows=len(utts)))
        return [self._hypothesis(u.text) for u in utts]

    def open_stream(self, utt: Utterance) -> StreamSession:
        return _MockStream(self, utt)

    def concurrency(self) -> int:
        return int(self.options["slots"])

    def info(self) -> dict[str, Any]:
        return {"simulated": True, "test_step_delay_ms": self.step_delay_ms}


class _MockStream(StreamSession):
    """Emits a partial every `partial_ms` of received audio, after one simulated step."""

    def __init__(self, backend: MockBackend, utt: Utterance) -> None:
        super().__init__()
        self._b = backend
        self._utt = utt
        self._received = 0
        self._next_partial = int(backend.options["partial_ms"]) * 16
        self._chunks: list[np.ndarray | None] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._run, name="mock-stream", daemon=True).start()

    def send(self, chunk: np.ndarray) -> None:
        with self._cv:
            self._chunks.append(chunk)
            self._cv.notify()

    def close_input(self) -> None:
        with self._cv:
            self._chunks.append(None)
            self._cv.notify()

    def _run(self) -> None:
        total = len(self._utt.audio)
        step_audio_s = int(self._b.options["partial_ms"]) / 1000.0
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._chunks))
                chunk = self._chunks.pop(0)
            if chunk is None:
                self._b._sleep(self._b._step_ms(step_audio_s))
                self._final(self._b._hypothesis(self._utt.text))
                return
            self._received += len(chunk)
            while self._received >= self._next_partial:
                self._next_partial += int(self._b.options["partial_ms"]) * 16
                self._b._sleep(self._b._step_ms(step_audio_s))
                self._partial(self._b._hypothesis(self._utt.text, upto=self._received / total))
