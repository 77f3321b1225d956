"""Loading icefall checkpoints: the argument file, epoch-N.pt's recorded arguments, tokens.txt,
and what is refused (unknown arguments by name, a mismatched state dict, an untrained chunk)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine.errors import CheckpointError, InvalidRequestError
from engine.families import resolve_family
from tests.engine.zipformer.conftest import CHECKPOINT, clip, make_runner, reference, transcribe_offline

CLIP = "ps_goforward"


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    shutil.copytree(CHECKPOINT, d)
    return d


def test_the_fixture_is_detected_as_zipformer() -> None:
    assert resolve_family(str(CHECKPOINT)).name == "zipformer"


def test_an_unknown_argument_is_refused_by_name(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    args = json.loads((d / "model_args.json").read_text())
    args["encoder_dims"] = "1,2"  # a typo of encoder_dim
    (d / "model_args.json").write_text(json.dumps(args))
    with pytest.raises(CheckpointError, match=r"unknown Zipformer argument.*encoder_dims"):
        make_runner(ckpt_dir=str(d))


def test_a_state_dict_of_another_shape_is_refused(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    args = json.loads((d / "model_args.json").read_text())
    args["num_encoder_layers"] = "1,1,1,1,1,1"  # the checkpoint has 2 layers in stack 3
    (d / "model_args.json").write_text(json.dumps(args))
    with pytest.raises(CheckpointError, match="unexpected"):
        make_runner(ckpt_dir=str(d))


def test_epoch_checkpoint_with_recorded_args_and_tokens_txt_only(tmp_path: Path) -> None:
    """icefall's training checkpoint carries every training parameter beside the state dict; the
    model's are read, the rest (optimizer knobs) ignored. tokens.txt stands in for bpe.model."""
    d = tmp_path / "exp"
    d.mkdir()
    args = json.loads((CHECKPOINT / "model_args.json").read_text())
    blob = torch.load(CHECKPOINT / "pretrained.pt", weights_only=False)
    torch.save({**blob, **args, "base_lr": 0.045, "batch_idx_train": 1234, "optimizer": {}}, d / "epoch-3.pt")
    shutil.copy(CHECKPOINT / "tokens.txt", d / "tokens.txt")
    assert resolve_family(str(d)).name == "zipformer"
    runner = make_runner(ckpt_dir=str(d))
    out = transcribe_offline(runner, clip(CLIP))
    ref = reference()["clips"][CLIP]["offline"]["greedy"]["tokens"]
    assert out.tokens == ref
    pieces = [line.split()[0] for line in (d / "tokens.txt").read_text().splitlines()]
    assert out.text == "".join(pieces[t] for t in ref).replace("▁", " ").strip()


def test_an_untrained_chunk_size_is_refused_naming_the_trained_ones() -> None:
    with pytest.raises(InvalidRequestError, match=r"chunk_size=24 .*trained chunk_size.*16, 32, 64"):
        make_runner(chunk_size=24)
    with pytest.raises(InvalidRequestError, match=r"num_left_chunks=3 .*48 left-context frames.*64, 128, 256"):
        make_runner(chunk_size=16, num_left_chunks=3)


def test_trained_chunk_choices_are_served() -> None:
    runner = make_runner(chunk_size=64, num_left_chunks=4)
    assert runner.geometry is not None and (runner.geometry.chunk, runner.geometry.left) == (64, 256)
    assert runner.stream_chunk_samples == 2 * 64 * 160
    default = make_runner()
    assert default.geometry is not None and (default.geometry.chunk, default.geometry.left) == (16, 64)


def test_icefall_names_round_trip() -> None:
    """`icefall_state_dict` writes the names icefall's model has (what benchmarks' random models use)."""
    from engine.models.zipformer.checkpoint import icefall_state_dict

    runner = make_runner()
    ours = icefall_state_dict(runner.model)
    theirs = torch.load(CHECKPOINT / "pretrained.pt", weights_only=False)["model"]
    training_only = {k for k in theirs if k.startswith(("simple_am_proj.", "simple_lm_proj."))}
    assert set(ours) == set(theirs) - training_only
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_a_non_causal_model_s_recorded_chunk_arguments_are_ignored_as_icefall_does() -> None:
    from engine.models.zipformer.config import ZipformerConfig

    args = json.loads((CHECKPOINT / "model_args.json").read_text())
    cfg = ZipformerConfig.from_args({**args, "causal": False}, "test")
    assert cfg.chunk_size == (-1,) and cfg.left_context_frames == (-1,) and cfg.streaming_chunks == ()
    causal = ZipformerConfig.from_args(args, "test")
    assert causal.streaming_chunks == (16, 32, 64)
