"""A model family with no model: the smallest runner that honours the whole seam.

It exists to prove the seam (tests/engine/test_family_contract.py runs it beside the real
families) and as a template for a new family. Its "checkpoint" is a directory holding
`fake_family.json`; its transcript of a waveform is one word per `FRAME_MS` of audio, `loud` or
`quiet` by the frame's RMS level, so outputs depend on the audio and are exactly reproducible.
(A family with knobs declares them as fields of its options dataclass; see WenetOptions.)

A checkpoint may also carry a fault for tests of the server around the engine:
`fail_at_audio_seconds` makes `execute()` raise once a running request has heard that much audio,
so that an exception escapes `step()` in a real engine thread (tests/e2e/test_engine_death.py).
It streams (a partial per step, committed words never change) and batches (every running
request advances in one `execute()`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from engine.capabilities import Capabilities
from engine.config import EngineConfig
from engine.errors import CheckpointError
from engine.families import ModelFamily
from engine.request import Request
from engine.runner import ModelInfo, ModelRunner, RunnerStats
from engine.types import DecodingOptions, RequestOutput

MARKER = "fake_family.json"
SAMPLE_RATE = 16000
LOUD_RMS = 0.05
"""A frame with RMS above this is 'loud' (speech is ~0.1, room noise ~0.01)."""
WORDS = ("quiet", "loud")
FRAME_MS = 100
"""Audio (ms) per transcribed word."""
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000


@dataclass(frozen=True)
class FakeOptions:
    """No options."""


@dataclass(eq=False)
class _State:
    request: Request
    audio: list[np.ndarray] = field(default_factory=list)
    emitted: int = 0
    """Words already reported (committed)."""


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    return os.path.isfile(os.path.join(ckpt_dir, checkpoint_name or MARKER))


class InjectedFault(RuntimeError):
    """What a checkpoint's `fail_at_audio_seconds` makes `execute()` raise."""


def write_checkpoint(ckpt_dir: str, name: str = "fake-asr", fail_at_audio_seconds: float | None = None) -> str:
    """A checkpoint directory this family loads (for tests and examples); with
    `fail_at_audio_seconds`, one whose runner raises InjectedFault (module doc)."""
    os.makedirs(ckpt_dir, exist_ok=True)
    fields: dict[str, object] = {"name": name}
    if fail_at_audio_seconds is not None:
        fields["fail_at_audio_seconds"] = fail_at_audio_seconds
    with open(os.path.join(ckpt_dir, MARKER), "w") as f:
        json.dump(fields, f)
    return ckpt_dir


def _read_marker(config: EngineConfig) -> dict[str, object]:
    path = os.path.join(config.resolved_ckpt_dir(), config.checkpoint_name or MARKER)
    try:
        with open(path) as f:
            fields = json.load(f)
        str(fields["name"])
        float(fields.get("fail_at_audio_seconds") or 0)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: not a fake-family checkpoint ({exc})") from exc
    return dict(fields)


def _info(name: str) -> ModelInfo:
    return ModelInfo(family="fake", model=name, sample_rate=SAMPLE_RATE, languages=("en",),
                     supports_streaming=True, streaming_styles=("chunked",), decode_methods=("rms",),
                     decode_method="rms", capabilities=Capabilities(), checkpoint_format="fake",
                     details={"frame_samples": FRAME_SAMPLES})


def describe(config: EngineConfig, options: FakeOptions) -> ModelInfo:
    return _info(str(_read_marker(config)["name"]))


class FakeRunner:
    sample_rate = SAMPLE_RATE
    supports_streaming = True

    def __init__(self, config: EngineConfig, options: FakeOptions) -> None:
        fields = _read_marker(config)
        self.name = str(fields["name"])
        fail_at = fields.get("fail_at_audio_seconds")
        self.fail_at_samples = None if fail_at is None else int(float(fail_at) * SAMPLE_RATE)
        self.config = config
        self.frame = FRAME_SAMPLES
        self.stream_chunk_samples = self.frame
        self.streams_stepped = 0
        self._running: dict[str, _State] = {}

    def info(self) -> ModelInfo:
        return _info(self.name)

    def stats(self) -> RunnerStats:
        return RunnerStats(streams=sum(s.request.streaming for s in self._running.values()),
                           decode_slots_used=len(self._running), decode_slots_capacity=self.config.max_batch_size)

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        """Nothing of its own: it has no capabilities to range-check (Capabilities() refuses the rest)."""

    def free_slots(self) -> int:
        return self.config.max_batch_size - len(self._running)

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        for r in requests:
            self._running[r.request_id] = _State(r, [r.audio] if r.audio is not None else [])
        return []

    def has_work(self) -> bool:
        return any(not s.request.streaming or s.request.pending_samples or s.request.input_finished
                   for s in self._running.values())

    def execute(self) -> list[RequestOutput]:
        outputs = []
        self.streams_stepped = 0
        for rid, state in list(self._running.items()):
            req = state.request
            if req.streaming:
                chunk = req.take_pending_audio()
                if chunk.size:
                    state.audio.append(chunk)
                    self.streams_stepped += 1
                elif not req.input_finished:
                    continue
            audio = np.concatenate(state.audio) if state.audio else np.zeros(0, np.float32)
            if self.fail_at_samples is not None and audio.size >= self.fail_at_samples:
                raise InjectedFault(f"injected fault: request {rid} reached {audio.size / SAMPLE_RATE:g} s of audio")
            done = not req.streaming or req.input_finished
            words = self._words(audio, final=done)
            text = " ".join(words)
            tokens = [WORDS.index(w) for w in words]
            if done:
                del self._running[rid]
                outputs.append(RequestOutput(rid, text=text, tokens=tokens, finished=True, finish_reason="stop",
                                             duration=audio.size / SAMPLE_RATE, committed=text,
                                             confidence=1.0))
            elif len(words) > state.emitted:
                state.emitted = len(words)
                outputs.append(RequestOutput(rid, text=text, tokens=tokens, committed=text,
                                             duration=audio.size / SAMPLE_RATE))
        return outputs

    def _words(self, audio: np.ndarray, final: bool) -> list[str]:
        frames = audio.size // self.frame + (1 if final and audio.size % self.frame else 0)
        return [WORDS[float(np.sqrt(np.mean(np.square(audio[i * self.frame:(i + 1) * self.frame])))) > LOUD_RMS]
                for i in range(frames)]

    def release(self, request: Request) -> None:
        self._running.pop(request.request_id, None)

    def shutdown(self) -> None:
        self._running.clear()


def build(config: EngineConfig, options: FakeOptions) -> ModelRunner:
    return FakeRunner(config, options)


FAMILY = ModelFamily(name="fake", detect=detect, build=build, options=FakeOptions, describe=describe)
