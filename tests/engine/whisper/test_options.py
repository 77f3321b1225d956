"""Whisper's live-streaming knobs are family options (`family_options["whisper"]`); their old
`EngineConfig` names stay one release as deprecated aliases: they still work, with a
DeprecationWarning, and the family's own entry wins over them."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from engine import ASREngine, EngineConfig
from engine.errors import InvalidRequestError
from engine.families import family_options
from engine.models.whisper import FAMILY, WhisperOptions
from tests.conftest import load_clip

CLIP = "ps_goforward"  # 2.8 s: a few passes at any cadence tested here
BLOCK_SAMPLES = 8000  # 500 ms fed at a time


def _whisper_options(config: EngineConfig) -> WhisperOptions:
    """The options the engine builds for a Whisper checkpoint (engine/admission.py's reading)."""
    options: WhisperOptions = family_options(FAMILY, config.family_options, config.family_knob_aliases().get("whisper"))
    return options


def test_old_names_still_set_the_options_with_a_warning() -> None:
    config = EngineConfig(stream_step_ms=250, stream_window_s=10.0, stream_encoder_context="full")
    with pytest.warns(DeprecationWarning) as caught:
        options = _whisper_options(config)
    assert options == WhisperOptions(stream_step_ms=250, stream_window_s=10.0, stream_encoder_context="full")
    assert [str(w.message).split(" is deprecated")[0] for w in caught] == [
        "EngineConfig.stream_step_ms", "EngineConfig.stream_window_s", "EngineConfig.stream_encoder_context"]
    assert "family_options['whisper']['stream_step_ms'] (server setting OASR_WHISPER_STREAM_STEP_MS)" in str(
        caught[0].message)


@pytest.mark.parametrize("entry", [
    {"stream_step_ms": 1000, "stream_encoder_context": "fit"},
    WhisperOptions(stream_step_ms=1000),  # an instance: the fields it sets win, the alias fills the rest
])
def test_the_family_entry_wins_over_an_old_name(entry: Any) -> None:
    config = EngineConfig(stream_step_ms=250, stream_window_s=10.0, family_options={"whisper": entry})
    with pytest.warns(DeprecationWarning):
        options = _whisper_options(config)
    assert (options.stream_step_ms, options.stream_window_s, options.stream_encoder_context) == (1000, 10.0, "fit")


def test_no_old_name_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _whisper_options(EngineConfig()) == WhisperOptions()
        assert EngineConfig().family_knob_aliases() == {}


@pytest.mark.parametrize(("given", "message"), [
    ({"stream_step_ms": 10}, "stream_step_ms must be >= 20, got 10"),
    ({"stream_encoder_context": "half"}, "stream_encoder_context must be 'fit' or 'full', got 'half'"),
    ({"stream_window_s": 0.0}, "stream_window_s must be > 0, got 0.0"),
])
def test_bad_values_are_refused_under_either_name(given: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        _whisper_options(EngineConfig(family_options={"whisper": given}))
    with pytest.raises(InvalidRequestError, match=message), pytest.warns(DeprecationWarning):
        _whisper_options(EngineConfig(**given))


def _passes(engine: ASREngine, audio: Any) -> tuple[int, str]:
    """Passes one stream fed 500 ms at a time gets (each block's work run to completion), and its final text."""
    rid = engine.add_streaming_request()
    stream = None
    final = ""
    for off in range(0, audio.size, BLOCK_SAMPLES):
        engine.feed_chunk(rid, audio[off : off + BLOCK_SAMPLES], is_last=off + BLOCK_SAMPLES >= audio.size)
        while engine.has_work():
            outputs = engine.step()
            stream = stream or engine.runner.streams.get(rid)  # type: ignore[attr-defined]
            final = next((o.text for o in outputs if o.request_id == rid and o.finished), final)
    assert stream is not None
    return stream.passes, final


def test_the_engine_streams_at_the_cadence_either_name_sets() -> None:
    """End to end: the old name sets a live stream's pass cadence, and the family's entry wins."""
    audio = load_clip(CLIP)
    quiet = {"skip_silent_passes": False, "speech_coverage": False}  # every due pass runs, no extra one
    with pytest.warns(DeprecationWarning):
        slow = ASREngine(EngineConfig(quantization="none", service_mode="streaming", max_batch_size=1, stream_step_ms=1500,
                                      family_options={"whisper": quiet}))
    try:
        slow_passes, slow_text = _passes(slow, audio)
    finally:
        slow.shutdown()
    with pytest.warns(DeprecationWarning):
        fast = ASREngine(EngineConfig(quantization="none", service_mode="streaming", max_batch_size=1, stream_step_ms=1500,
                                      family_options={"whisper": {**quiet, "stream_step_ms": 500}}))
    try:
        fast_passes, fast_text = _passes(fast, audio)
    finally:
        fast.shutdown()
    # 2.8 s of audio: a pass at 1.5 s and the final one, against one every 0.5 s and the final one
    assert (slow_passes, fast_passes) == (2, 6)
    assert "forward" in slow_text.lower() and "forward" in fast_text.lower()
