"""Every model family in the family table passes one contract, through the public engine API.

A family added to `engine.families.FAMILY_TABLE` must add a checkpoint builder to `CHECKPOINTS`
(the first test fails until it does) and then passes: typed info with no file-system path, typed
stats that return to idle, admission errors, abort, a batch of mixed lengths equal to each
request alone, streaming with committed text that never changes (or, for an offline-only family,
live sessions refused with a clear error), and shutdown.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from engine import ASREngine, DecodingOptions, EngineConfig
from engine.admission import describe_model, described_card
from engine.errors import EngineShutdownError, InvalidRequestError, UnknownRequestError, UnsupportedError
from engine.families import FAMILY_TABLE, family_names, resolve_family
from engine.runner import ModelInfo, RunnerStats
from tests.conftest import load_clip


def _whisper(tmp: Path) -> EngineConfig:
    return EngineConfig(quantization="none")  # the embedded tiny.en


def _wenet(tmp: Path) -> EngineConfig:
    from engine.models.wenet.testing import write_checkpoint

    return EngineConfig(ckpt_dir=write_checkpoint(str(tmp / "wenet")), chunk_size=8, max_num_blocks=512)


def _nemo(tmp: Path) -> EngineConfig:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "nemo" / "hybrid_cache_aware"
    return EngineConfig(ckpt_dir=str(fixture))


def _paraformer(tmp: Path) -> EngineConfig:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "paraformer" / "tiny"
    return EngineConfig(ckpt_dir=str(fixture))


def _paraformer_online(tmp: Path) -> EngineConfig:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "paraformer" / "online"
    return EngineConfig(ckpt_dir=str(fixture))


def _zipformer(tmp: Path) -> EngineConfig:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "zipformer" / "tiny_streaming"
    # its largest trained chunk (1.28 s): 4x fewer steps than the default 320 ms, same code paths
    return EngineConfig(ckpt_dir=str(fixture), chunk_size=64, num_left_chunks=4)


def _speechllm(tmp: Path) -> EngineConfig:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "speechllm" / "qwen2_audio"
    return EngineConfig(ckpt_dir=str(fixture), family_options={"speechllm": {"max_new_tokens": 12}})


def _fake(tmp: Path) -> EngineConfig:
    from engine.models.fake import write_checkpoint

    return EngineConfig(ckpt_dir=write_checkpoint(str(tmp / "fake")))


CHECKPOINTS: dict[str, Callable[[Path], EngineConfig]] = {
    "whisper": _whisper,
    "wenet": _wenet,
    "nemo": _nemo,
    "paraformer": _paraformer,
    "zipformer": _zipformer,
    "speechllm": _speechllm,
    "fake": _fake,
}
"""How to build a servable checkpoint of each family (real or reference-written weights)."""
VARIANTS: dict[str, Callable[[Path], EngineConfig]] = {
    "paraformer-online": _paraformer_online,
}
"""Further checkpoints of a family whose runner differs (paraformer-online streams; the offline
Paraformer does not): they pass the same contract."""

CLIPS = ("mfa_her", "mfa_thoughts", "mfa_um")
"""Three real clips of different lengths (about 1, 3 and 5 s)."""


def test_every_family_in_the_table_has_a_contract_checkpoint() -> None:
    assert sorted(CHECKPOINTS) == sorted(family_names())
    assert len({e.module for e in FAMILY_TABLE}) == len(FAMILY_TABLE)


@pytest.fixture(scope="module", params=sorted({**CHECKPOINTS, **VARIANTS}))
def config(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> EngineConfig:
    return {**CHECKPOINTS, **VARIANTS}[request.param](tmp_path_factory.mktemp(request.param))


def test_a_layer_quantization_is_applied_or_refused_before_loading(config: EngineConfig) -> None:
    """int8_w8a8 is served by a family that quantizes its layers; any other refuses it instead of
    silently running float."""
    family = resolve_family(config.resolved_ckpt_dir(), config.checkpoint_name)
    asked = dataclasses.replace(config, quantization="int8_w8a8")
    if "int8_w8a8" not in family.online_quantization:
        with pytest.raises(UnsupportedError, match=f"not offered by {family.name} models"):
            ASREngine(asked)
        return
    eng = ASREngine(asked)
    try:
        assert eng.info()["quantization"] == "int8_w8a8"
    finally:
        eng.shutdown()


@pytest.fixture(scope="module")
def engine(config: EngineConfig) -> Iterator[ASREngine]:
    eng = ASREngine(dataclasses.replace(config, service_mode="streaming"))
    yield eng
    eng.shutdown()


def _assert_idle(engine: ASREngine) -> None:
    stats = engine.runner.stats()
    assert isinstance(stats, RunnerStats)
    assert stats.streams == 0 and stats.kv_blocks_used == 0 and stats.decode_slots_used == 0, stats
    assert engine.num_running == engine.num_waiting == 0 and not engine.has_unfinished()


def test_info_is_typed_and_shows_no_path(engine: ASREngine, config: EngineConfig) -> None:
    info = engine.model_info
    assert isinstance(info, ModelInfo) and info == engine.runner.info()
    assert info.family in family_names() and info.model and info.sample_rate == engine.sample_rate > 0
    assert info.decode_method in info.decode_methods
    card = engine.info()
    text = json.dumps(card)  # plain JSON values only
    assert card["family"] == info.family and card["model"] == info.model
    assert card["streaming_enabled"] is info.supports_streaming
    ckpt_dir = os.path.realpath(config.resolved_ckpt_dir())
    assert ckpt_dir not in text and os.sep + "tmp" + os.sep not in text, card
    for value in card.values():
        assert not (isinstance(value, str) and os.path.isabs(value)), f"a path in the model card: {value}"


DESCRIBED_FIELDS = ("family", "model", "sample_rate", "languages", "supports_streaming", "streaming_styles",
                    "decode_methods", "decode_method", "capabilities", "checkpoint_format")
"""ModelInfo fields a family's `describe` gives exactly as its loaded runner does."""


def test_a_model_is_described_before_loading_as_it_loads(engine: ASREngine, config: EngineConfig) -> None:
    """/v1/models shows an unloaded model's capabilities from `describe`: every family describes,
    and what it describes from configuration alone is what the loaded runner reports."""
    described = describe_model(dataclasses.replace(config, service_mode="streaming"))
    assert described is not None, f"family {engine.family!r} has no describe"
    loaded = engine.model_info
    for name in DESCRIBED_FIELDS:
        assert getattr(described, name) == getattr(loaded, name), name
    assert described.parameters == 0
    for key, value in described.details.items():
        assert key in loaded.details and loaded.details[key] == value, key
    card = described_card(described, service_mode="streaming")
    assert card["capabilities"] == engine.info()["capabilities"] and card["described"] is True
    assert card["streaming_enabled"] is engine.streaming_enabled


def test_admission_errors_are_clear(engine: ASREngine) -> None:
    audio = load_clip(CLIPS[0])
    with pytest.raises(InvalidRequestError, match="float samples"):  # float samples of any width are converted
        engine.add_request((audio * 32767).astype(np.int16))
    engine.abort_request(engine.add_request(audio.astype(np.float64)))
    engine.run()
    with pytest.raises(InvalidRequestError, match="Hz"):
        engine.add_request(audio, sample_rate=engine.sample_rate // 2)
    with pytest.raises(InvalidRequestError, match="mono"):
        engine.add_request(np.stack([audio, audio]))
    with pytest.raises(InvalidRequestError, match="empty"):
        engine.add_request(np.zeros(0, np.float32))
    with pytest.raises(InvalidRequestError, match="beam_size"):
        engine.add_request(audio, decoding=DecodingOptions(beam_size=0))
    if not engine.model_info.capabilities.translate:
        with pytest.raises(UnsupportedError):
            engine.add_request(audio, decoding=DecodingOptions(task="translate"))
    with pytest.raises(UnknownRequestError):
        engine.feed_chunk("no-such-request", audio)
    _assert_idle(engine)


def test_streaming_is_refused_by_an_offline_engine(config: EngineConfig) -> None:
    offline = ASREngine(dataclasses.replace(config, service_mode="offline"))
    try:
        with pytest.raises(InvalidRequestError, match="service_mode"):
            offline.add_streaming_request()
        with pytest.raises(InvalidRequestError, match="service_mode"):
            offline.add_request(load_clip(CLIPS[0]), streaming=True)
        (out,) = offline.transcribe_outputs(load_clip(CLIPS[0]))  # offline requests are served
        assert out.finish_reason == "stop"
    finally:
        offline.shutdown()


def test_an_unknown_decode_method_is_refused_at_construction(config: EngineConfig) -> None:
    with pytest.raises(InvalidRequestError, match="decode_method 'no-such-decoder'"):
        ASREngine(dataclasses.replace(config, decode_method="no-such-decoder"))


def test_family_options_not_keyed_by_a_family_are_refused(config: EngineConfig) -> None:
    """An option given without its family's key would otherwise be ignored without a word."""
    with pytest.raises(InvalidRequestError, match="keyed by family name"):
        ASREngine(dataclasses.replace(config, family_options={"beam_size": 3}))


def _offline_only(engine: ASREngine) -> bool:
    """True (after checking that live sessions are refused) when the family has no streaming
    runtime: the streaming tests below then have nothing more to check."""
    if engine.model_info.supports_streaming:
        return False
    with pytest.raises(UnsupportedError, match="no streaming runtime"):
        engine.add_streaming_request()
    with pytest.raises(UnsupportedError, match="no streaming runtime"):
        engine.add_request(load_clip(CLIPS[0]), streaming=True)
    return True


def test_abort_waiting_and_running(engine: ASREngine) -> None:
    waiting = engine.add_request(load_clip(CLIPS[1]))
    engine.abort_request(waiting)
    if _offline_only(engine):  # an offline request runs in the step that admits it: abort it waiting
        (out,) = [o for o in engine.run() if o.request_id == waiting]
        assert out.finish_reason == "abort"
        _assert_idle(engine)
        return
    stream = engine.add_streaming_request()
    engine.feed_chunk(stream, load_clip(CLIPS[1])[: engine.sample_rate])
    outputs = engine.step() + engine.step()
    assert engine.num_running == 1 and engine.runner.stats().streams == 1  # the stream holds state now
    engine.abort_request(stream)
    finished = {o.request_id: o for o in outputs + engine.run() if o.finished}
    assert finished[waiting].finish_reason == "abort" and finished[stream].finish_reason == "abort"
    _assert_idle(engine)


def test_a_batch_of_mixed_lengths_equals_each_alone(engine: ASREngine) -> None:
    audios = [load_clip(c) for c in CLIPS]
    together = engine.transcribe_outputs(audios)
    alone = [engine.transcribe_outputs(a)[0] for a in audios]
    assert [o.finish_reason for o in together] == ["stop"] * len(CLIPS)
    assert [o.tokens for o in together] == [o.tokens for o in alone]
    assert [o.text for o in together] == [o.text for o in alone]
    assert all(o.duration == pytest.approx(len(a) / engine.sample_rate) for o, a in zip(together, audios))
    _assert_idle(engine)


def test_stream_fed_in_chunks_commits_monotonically(engine: ASREngine) -> None:
    if _offline_only(engine):
        return
    audio = load_clip(CLIPS[2])
    rid = engine.add_streaming_request()
    partials = []
    for chunk in np.array_split(audio, 12):
        engine.feed_chunk(rid, chunk)
        partials += [o for o in engine.step() if o.request_id == rid and not o.finished]
    engine.feed_chunk(rid, np.zeros(0, np.float32), is_last=True)
    (final,) = [o for o in engine.run() if o.request_id == rid]
    assert final.finished and final.finish_reason == "stop" and final.text.strip()
    committed = [p.committed for p in partials]
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(committed))
    assert all(final.text.startswith(c.strip()) or not c for c in committed)
    _assert_idle(engine)


def test_attached_audio_streams_like_a_live_feed(engine: ASREngine) -> None:
    if _offline_only(engine):
        return
    audio = load_clip(CLIPS[2])
    assert engine.runner.stream_chunk_samples > 0
    (attached,) = engine.transcribe_outputs(audio, streaming=True)
    rid = engine.add_streaming_request()
    n = engine.runner.stream_chunk_samples
    for start in range(0, len(audio), n):  # what the engine releases of attached audio: a chunk a step
        engine.feed_chunk(rid, audio[start : start + n])
        engine.step()
    engine.feed_chunk(rid, np.zeros(0, np.float32), is_last=True)
    (fed,) = [o for o in engine.run() if o.request_id == rid]
    assert attached.finish_reason == fed.finish_reason == "stop"
    assert attached.text == fed.text
    _assert_idle(engine)


def test_shutdown_refuses_new_work_and_is_idempotent(config: EngineConfig) -> None:
    eng = ASREngine(config)
    rid = eng.add_request(load_clip(CLIPS[0]))
    eng.shutdown()
    eng.shutdown()
    assert not eng.has_unfinished() and rid
    with pytest.raises(EngineShutdownError):
        eng.add_request(load_clip(CLIPS[0]))
