"""The Paraformer runner beyond parity: long files cut into pieces, audio too short for a frame,
option refusals, the capabilities it declares, and checkpoint directories it refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine import ASREngine, EngineConfig
from engine.capabilities import check_capabilities
from engine.errors import CheckpointError, UnsupportedError
from engine.models.paraformer.runner import ParaformerRunner, forwards
from engine.types import DecodingOptions
from tests.engine.paraformer.conftest import CKPT, clip, make_runner, recognize, reference

LONG_CLIP = "mfa_um"  # about 9 s


def test_a_long_file_is_cut_into_pieces_recognised_in_one_batch() -> None:
    """max_segment_seconds=2: the file's tokens are those of its 2 s pieces recognised one by one,
    in order, and their times are offset to the piece's place in the file."""
    audio = clip(LONG_CLIP)
    cut = make_runner(family_options={"paraformer": {"max_segment_seconds": 2.0}})
    (whole,) = recognize(cut, [audio], DecodingOptions(word_timestamps=True))
    piece = 2 * cut.sample_rate
    parts = recognize(cut, [audio[i : i + piece] for i in range(0, len(audio), piece)])
    assert len(parts) > 3
    assert whole.tokens == [t for p in parts for t in p.tokens]
    assert whole.tokens != reference()["clips"][LONG_CLIP]["token_ids"]  # the cut changes the context
    assert whole.timestamps is not None and whole.timestamps == sorted(whole.timestamps)
    first_of_last = len(whole.tokens) - len(parts[-1].tokens)
    assert whole.timestamps[first_of_last] >= (len(parts) - 1) * 2.0 - 0.1  # 1.5 frames early at most
    assert whole.words and whole.words[-1].end <= len(audio) / cut.sample_rate + 1e-6


def test_forwards_bound_padding_and_rows() -> None:
    assert forwards([100, 90, 80, 40, 39, 10], max_rows=8, max_pad_ratio=1.25) == [[0, 1, 2], [3, 4], [5]]
    assert forwards([100, 90, 80], max_rows=2, max_pad_ratio=10.0) == [[0, 1], [2]]
    assert forwards([100, 10], max_rows=8, max_pad_ratio=1.0) == [[0], [1]]
    assert forwards([], max_rows=8, max_pad_ratio=1.25) == []
    # a frame budget bounds a forward's memory: an hour's 60 s pieces run eight at a time
    assert forwards([1000] * 20, max_rows=64, max_pad_ratio=1.25, max_frames=8000) == [
        list(range(0, 8)), list(range(8, 16)), list(range(16, 20))]
    assert forwards([9000, 10], max_rows=8, max_pad_ratio=1e9, max_frames=8000) == [[0], [1]]


def test_audio_shorter_than_a_frame_gives_an_empty_transcript(runner: ParaformerRunner) -> None:
    short, speech = recognize(runner, [np.full(200, 0.1, np.float32), clip("mfa_her")])
    assert short.finish_reason == "stop" and short.text == "" and short.tokens == []
    assert speech.tokens == reference()["clips"]["mfa_her"]["token_ids"]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (DecodingOptions(beam_size=2), "beam_size is not supported by the paraformer model .*greedily"),
        (DecodingOptions(temperature=0.5), "temperature is not supported .*does not sample"),
        (DecodingOptions(task="translate"), "task='translate' is not supported .*only transcribes"),
        (DecodingOptions(prompt="hello"), "prompt is not supported .*no previous-text prompt"),
        (DecodingOptions(keywords=("curtain",)), "keywords is not supported .*no keyword biasing"),
    ],
)
def test_options_it_cannot_serve_are_refused(runner: ParaformerRunner, options: DecodingOptions, match: str) -> None:
    """Refused at admission from the declared capabilities (a plain Paraformer has no SeACo module)."""
    info = runner.info()
    with pytest.raises(UnsupportedError, match=match):
        check_capabilities(info.capabilities, family=info.family, model=info.model, languages=info.languages,
                           options=options)


def test_declared_capabilities(runner: ParaformerRunner) -> None:
    info = runner.info()
    caps = info.capabilities
    assert info.family == "paraformer" and not info.supports_streaming
    assert (caps.max_beam_size, caps.max_n_best, caps.keywords, caps.prompt) == (1, 1, False, False)
    assert caps.logprobs and caps.word_timestamps and not caps.sampling and not caps.translate
    assert info.details["lfr"] == [7, 6] and info.details["frame_ms"] == 60
    assert info.languages == ()  # FunASR's config does not say; the deployment may declare them
    assert make_runner(family_options={"paraformer": {"languages": ("zh", "en")}}).info().languages == ("zh", "en")
    with pytest.raises(ValueError, match="ISO 639-1"):
        make_runner(family_options={"paraformer": {"languages": ("zh-CN",)}})


def test_a_seaco_checkpoint_declares_keywords(seaco_runner: ParaformerRunner) -> None:
    info = seaco_runner.info()
    assert info.capabilities.keywords and info.details["contextual"] == "seaco"
    seaco_runner.check_options(DecodingOptions(keywords=("curtain", "the wizard")), streaming=False)
    with pytest.raises(UnsupportedError, match="at most 49 keywords"):
        seaco_runner.check_options(DecodingOptions(keywords=tuple(f"w{i}" for i in range(50))), streaming=False)


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(CKPT, dst)
    return dst


def test_tokens_txt_loads_like_tokens_json(tmp_path: Path) -> None:
    ckpt = _copy(tmp_path)
    tokens = json.loads((ckpt / "tokens.json").read_text())
    (ckpt / "tokens.json").unlink()
    (ckpt / "tokens.txt").write_text("\n".join(tokens) + "\n")
    (out,) = recognize(make_runner(ckpt_dir=str(ckpt)), [clip("mfa_her")])
    assert out.text == reference()["clips"]["mfa_her"]["text"]


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("model", "ParaformerStreaming", r"encoder='SANMEncoder' is not served \(served: SANMEncoderChunkOpt\)"),
        ("model", "BiCifParaformer", "model='BiCifParaformer' is not served"),
        ("encoder_conf.input_layer", "conv2d", "input_layer='conv2d' is not served"),
    ],
)
def test_variants_it_does_not_serve_are_refused_at_load(tmp_path: Path, key: str, value: str, match: str) -> None:
    ckpt = _copy(tmp_path)
    raw = yaml.safe_load((ckpt / "config.yaml").read_text())
    section, _, field = key.rpartition(".")
    (raw[section] if section else raw)[field] = value
    (ckpt / "config.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(CheckpointError, match=match):
        ASREngine(EngineConfig(ckpt_dir=str(ckpt)))


def test_weights_that_disagree_with_the_config_are_refused(tmp_path: Path) -> None:
    ckpt = _copy(tmp_path)
    tokens = json.loads((ckpt / "tokens.json").read_text())
    (ckpt / "tokens.json").write_text(json.dumps(tokens[:-1]))
    with pytest.raises(CheckpointError, match=r"does not match config\.yaml"):
        make_runner(ckpt_dir=str(ckpt))
