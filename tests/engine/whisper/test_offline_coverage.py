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

    eng = ASREngine(EngineConfig(quantization="none"))
    yield eng
    eng.shutdown()


def test_text_over_a_silent_tail_window_is_dropped(engine: Any, clips: list[Clip]) -> None:
    audio = _joined(clips, ("cv_en_22058264", "cv_en_22058266", "cv_en_22058267"), 1.5)
    out = engine.transcribe_outputs(audio)[0]
    assert _spoken(out.text) == ["no", "firefox", "six"], out.text
    assert out.segments[-1].end <= audio.size / 16000


def test_speech_after_an_early_end_of_text_is_decoded_again(engine: Any, clips: list[Clip]) -> None:
    """ "He began ... on the left.", 5 s of silence, "I have a thousand thoughts about that thing":
    tiny.en, hearing both in one window, ends its text after the first sentence with a single
    timestamp, so the window is consumed whole and the second sentence was never decoded (as
    faster-whisper loses it too). The VAD hears it after the text's end: one more window from
    there writes it, and the seconds re-decoded are counted."""
    by_id = {c.id: c for c in clips}
    audio = np.concatenate([by_id["libri_61-70968-0000"].audio, np.zeros(5 * 16000, np.float32),
                            by_id["mfa_thoughts"].audio])
    before = engine.runner.stats()
    out = engine.transcribe_outputs(audio)[0]
    after = engine.runner.stats()
    spoken = " ".join(_spoken(out.text))
    assert spoken.startswith("he began") and "left" in spoken and spoken.endswith("thoughts about that thing"), out.text
    recovered = after.speech_recovered_seconds_total - before.speech_recovered_seconds_total
    uncovered = after.speech_uncovered_seconds_total - before.speech_uncovered_seconds_total
    assert 0.5 <= recovered <= by_id["mfa_thoughts"].duration and uncovered == 0.0, (recovered, uncovered)
