"""paraformer-online at parity with FunASR 1.4.16's ParaformerStreaming on the checkpoint it
wrote (tests/fixtures/paraformer/online): the token ids of every 600 ms (and 480 ms) chunk equal
what FunASR's streaming `generate(cache=..., is_final=...)` returned chunk by chunk, for each dev
clip alone, all clips as concurrent streams batched together, audio arriving in pieces of any
size, and a clip ending less than one frame past its last whole chunk (FunASR's tail window).
Also: the partials the runner reports, what it declares, and the decoders it refuses."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from engine.config import EngineConfig
from engine.errors import CheckpointError
from engine.families import family_options
from engine.models.paraformer import FAMILY, build
from engine.models.paraformer.online_runner import ParaformerOnlineRunner
from engine.request import Request
from engine.runner import ModelRunner
from engine.types import DecodingOptions, RequestOutput
from tests.conftest import load_clip
from tests.engine.paraformer.conftest import FIXTURES, reference

ONLINE_CKPT = FIXTURES / "online"
SETTINGS = reference()["online"]["settings"]


def online_runner(setting: dict[str, Any], ckpt: Path = ONLINE_CKPT) -> ModelRunner:
    options = {"chunk_size": tuple(setting["chunk_size"]), "encoder_chunk_look_back": setting["encoder_chunk_look_back"],
               "decoder_chunk_look_back": setting["decoder_chunk_look_back"]}  # fmt: skip
    config = EngineConfig(ckpt_dir=str(ckpt), family_options={"paraformer": options})
    return build(config, family_options(FAMILY, config.family_options))


def audio_of(key: str) -> np.ndarray:
    """A dev clip, or its first n samples for `clip@n` (the hash of the clip is checked by the
    offline parity tests' `clip`)."""
    clip_id, _, n = key.partition("@")
    audio = load_clip(clip_id)
    assert len(audio) == reference()["clips"][clip_id]["samples"]
    return audio[: int(n)] if n else audio


def stream(runner: ModelRunner, audios: dict[str, np.ndarray], piece: int) -> dict[str, list[RequestOutput]]:
    """Every audio as a live stream, all admitted together, fed `piece` samples per stream per
    step; the outputs of each, in order."""
    reqs = {k: Request(k, streaming=True, decoding=DecodingOptions(logprobs=True), sample_rate=16000)
            for k in audios}  # fmt: skip
    assert runner.admit(list(reqs.values())) == []
    fed = dict.fromkeys(audios, 0)
    outs: dict[str, list[RequestOutput]] = {k: [] for k in audios}
    while runner.has_work() or any(not r.input_finished for r in reqs.values()):
        for k, req in reqs.items():
            if not req.input_finished:
                req.append_audio(audios[k][fed[k] : fed[k] + piece])
                fed[k] += piece
                req.input_finished = fed[k] >= len(audios[k])
        for out in runner.execute():
            outs[out.request_id].append(out)
    assert all(o[-1].finished for o in outs.values()) and not runner.stats().streams
    return outs


def chunk_tokens(outs: list[RequestOutput]) -> list[list[int]]:
    """The tokens each output added: one list per chunk, as FunASR's calls returned them."""
    chunks, before = [], 0
    for out in outs:
        chunks.append(out.tokens[before:])
        before = len(out.tokens)
    return chunks


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "chunk{}-lookback{}-{}".format(
    s["chunk_size"][1], s["encoder_chunk_look_back"], s["decoder_chunk_look_back"]))  # fmt: skip
def test_chunk_tokens_equal_funasr_streaming(setting: dict[str, Any]) -> None:
    """Each clip alone (fed one chunk at a time, as FunASR was), then all as one batch of streams."""
    runner = online_runner(setting)
    stride = setting["chunk_size"][1] * 960
    expected = {k: v["chunk_token_ids"] for k, v in setting["clips"].items()}
    assert any(len(v) > 1 and sum(map(len, v)) > 10 for v in expected.values())
    for key in expected:
        (outs,) = stream(runner, {key: audio_of(key)}, stride).values()
        assert chunk_tokens(outs) == expected[key], key
    together = stream(runner, {k: audio_of(k) for k in expected}, stride)
    assert {k: chunk_tokens(o) for k, o in together.items()} == expected


def test_chunks_do_not_depend_on_how_the_audio_arrives() -> None:
    """Pieces of 1,234 samples (never a chunk's 9,600): the same chunk boundaries, the same tokens."""
    setting = SETTINGS[0]
    key = "libri_61-70968-0000"
    outs = stream(online_runner(setting), {key: audio_of(key)}, 1234)[key]
    got = [c for c in chunk_tokens(outs) if c]
    assert got == [c for c in setting["clips"][key]["chunk_token_ids"] if c]


def test_offline_request_equals_its_stream() -> None:
    """A whole file runs the same chunks, in one request."""
    setting = SETTINGS[0]
    runner = online_runner(setting)
    key = "mfa_thoughts"
    req = Request("r", streaming=False, decoding=DecodingOptions(), sample_rate=16000, audio=audio_of(key))
    runner.admit([req])
    outs = []
    while runner.has_work():
        outs += runner.execute()
    assert outs[-1].finished and outs[-1].tokens == [t for c in setting["clips"][key]["chunk_token_ids"] for t in c]


def test_partials_grow_and_committed_text_never_changes() -> None:
    setting = SETTINGS[0]
    runner = online_runner(setting)
    assert isinstance(runner, ParaformerOnlineRunner)
    key = "mfa_um"
    outs = stream(runner, {key: audio_of(key)}, 9600)[key]
    *partials, final = outs
    assert len(partials) >= 10 and not any(p.finished for p in partials)
    committed = ""
    for p in partials:
        assert p.text == runner.spelling.text(p.tokens) and p.text == p.committed + p.tentative
        assert p.committed.startswith(committed)
        committed = p.committed
    assert committed and final.finish_reason == "stop" and final.text.startswith(committed)
    assert final.token_logprobs is not None and len(final.token_logprobs) == len(final.tokens)
    assert all(lp <= 0 for lp in final.token_logprobs)


def test_declares_streaming_and_its_chunks() -> None:
    info = online_runner(SETTINGS[0]).info()
    assert info.family == "paraformer" and info.supports_streaming and info.streaming_styles == ("chunked",)
    assert info.model.startswith("paraformer-online-")
    assert info.details["chunk_size"] == [0, 10, 5] and info.details["chunk_ms"] == 600
    assert info.details["look_ahead_ms"] == 300
    caps = info.capabilities
    assert caps.logprobs and not caps.keywords and not caps.word_timestamps and caps.max_beam_size == 1


@pytest.mark.parametrize(("field", "value", "match"), [
    ("att_layer_num", 2, "att_layer_num=2 != num_blocks=3 is not served for ParaformerStreaming"),
    ("sanm_shfit", 0, "sanm_shfit=0 is not served for ParaformerStreaming"),
])  # fmt: skip
def test_decoders_it_cannot_stream_exactly_are_refused(tmp_path: Path, field: str, value: int, match: str) -> None:
    ckpt = tmp_path / "online"
    shutil.copytree(ONLINE_CKPT, ckpt)
    raw = yaml.safe_load((ckpt / "config.yaml").read_text())
    raw["decoder_conf"][field] = value
    (ckpt / "config.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(CheckpointError, match=match):
        online_runner(SETTINGS[0], ckpt)


def test_unbounded_look_back_is_refused() -> None:
    with pytest.raises(ValueError, match="unbounded look-back"):
        online_runner({**SETTINGS[0], "encoder_chunk_look_back": -1})
