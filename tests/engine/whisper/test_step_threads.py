"""Offline decoder steps take every thread on an idle host only where that changes no number
(step_threads.py `StepThreads.narrow`, engine/host_load.py): the exact int8 path, whose transcripts and token
log-probabilities are then the same on one thread or all; the float path always steps on one."""

from __future__ import annotations

from typing import Any

import pytest

from engine import DecodingOptions
from engine.models.whisper.int8 import exact_integer_decoder
from tests.conftest import Clip


def _outputs(engine: Any, clips: list[Clip], idle: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(engine.runner.step_threads.host_load, "others_idle", lambda: idle)
    outs = engine.transcribe_outputs([c.audio for c in clips], decoding=DecodingOptions(logprobs=True))
    return [(o.text, o.tokens, o.token_logprobs) for o in outs]


def test_int8_steps_widen_on_an_idle_host_and_read_the_same(engine_int8: Any, clips: list[Clip],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    runner = engine_int8.runner
    assert runner.step_threads.exact_on_any_threads and exact_integer_decoder(runner.model.decoder)
    some = [c for c in clips if c.text][:6]
    wide = _outputs(engine_int8, some, True, monkeypatch)
    narrow = _outputs(engine_int8, some, False, monkeypatch)
    assert wide == narrow and all(text for text, _, _ in wide)


def test_float_steps_never_widen(engine: Any) -> None:
    assert not engine.runner.step_threads.exact_on_any_threads
    assert not exact_integer_decoder(engine.runner.model.decoder)
