"""Offline speech coverage (issue 34) on real dev clips joined by silence, engine defaults.

- A window Whisper thinks holds no speech but writes confident text in, where the VAD hears no
  speech either, is silence: tiny.en wrote "Six. One. One. One. One. One." for a session ending
  in "six", the five "One." over the 0.3 s of silence left after its last window (no-speech
  0.77, mean log-probability -0.66, so Whisper's own silence rule kept them). Failed before the
  VAD check in `OfflineTranscription._silent`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conftest import Clip


def _joined(clips: list[Clip], ids: tuple[str, ...], pause_s: float, edge_s: float = 0.5) -> np.ndarray:
    by_id = {c.id: c for c in clips}
    pause = np.zeros(int(pause_s * 16000), np.float32)
    edge = np.zeros(int(edge_s * 16000), np.float32)
    parts = [edge]
    for i, cid in enumerate(ids):
        parts += [pause, by_id[cid].audio] if i else [by_id[cid].audio]
    return np.concatenate([*parts, edge])


def _spoken(text: str) -> list[str]:
    return "".join(ch for ch in text.lower() if ch.isalnum() or ch.isspace()).split()


@pytest.fixture(scope="module")
def engine() -> Any:
    from engine import ASREngine, EngineConfig

    eng = ASREngine(EngineConfig())
    yield eng
    eng.shutdown()


def test_text_over_a_silent_tail_window_is_dropped(engine: Any, clips: list[Clip]) -> None:
    audio = _joined(clips, ("cv_en_22058264", "cv_en_22058266", "cv_en_22058267"), 1.5)
    out = engine.transcribe_outputs(audio)[0]
    assert _spoken(out.text) == ["no", "firefox", "six"], out.text
    assert out.segments[-1].end <= audio.size / 16000
