"""Family-only server settings moved to their family's generated settings (`OASR_<FAMILY>_<OPTION>`);
the old names (`OASR_STREAM_STEP_MS`, `OASR_STREAM_ENCODER_CONTEXT`, `OASR_RECYCLE_STREAMING_HISTORY`)
still reach the family's options for one release, with a DeprecationWarning, and lose to the new name."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from app.settings import Settings
from engine.config import EngineConfig
from engine.families import family_options, load_family


def _options(config: EngineConfig, family: str) -> Any:
    """The family's options as the engine builds them from this configuration."""
    return family_options(load_family(family), config.family_options, config.family_knob_aliases().get(family))


def test_old_env_names_still_reach_the_family_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OASR_STREAM_STEP_MS", "250")
    monkeypatch.setenv("OASR_STREAM_ENCODER_CONTEXT", "full")
    monkeypatch.setenv("OASR_RECYCLE_STREAMING_HISTORY", "true")
    config = Settings().engine_config()
    with pytest.warns(DeprecationWarning, match="OASR_WHISPER_STREAM_STEP_MS"):
        whisper = _options(config, "whisper")
    assert (whisper.stream_step_ms, whisper.stream_encoder_context) == (250, "full")
    with pytest.warns(DeprecationWarning, match="OASR_WENET_RECYCLE_STREAMING_HISTORY"):
        assert _options(config, "wenet").recycle_streaming_history is True


def test_the_new_env_name_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OASR_STREAM_STEP_MS", "250")
    monkeypatch.setenv("OASR_WHISPER_STREAM_STEP_MS", "1000")
    monkeypatch.setenv("OASR_STREAM_ENCODER_CONTEXT", "full")
    with pytest.warns(DeprecationWarning):
        whisper = _options(Settings().engine_config(), "whisper")
    assert (whisper.stream_step_ms, whisper.stream_encoder_context) == (1000, "full")  # the alias fills the rest


def test_new_names_alone_set_the_options_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OASR_WHISPER_STREAM_WINDOW_S", "12.5")
    monkeypatch.setenv("OASR_WENET_MAX_STREAM_BLOCKS", "3")
    config = Settings().engine_config()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _options(config, "whisper").stream_window_s == 12.5
        assert _options(config, "wenet").max_stream_blocks == 3
    assert (config.stream_step_ms, config.stream_window_s, config.max_stream_blocks) == (None, None, None)


def test_keyword_arguments_take_the_same_path() -> None:
    """Settings built in code (keyword arguments, not the environment) resolve the same way."""
    with pytest.warns(DeprecationWarning):
        assert _options(Settings(stream_step_ms=750).engine_config(), "whisper").stream_step_ms == 750
    with pytest.warns(DeprecationWarning):
        config = Settings(stream_step_ms=750, whisper_stream_step_ms=300).engine_config()  # type: ignore[call-arg]
        assert _options(config, "whisper").stream_step_ms == 300
