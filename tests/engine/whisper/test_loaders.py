"""Checkpoint formats: the embedded CTranslate2 weights rewritten as an OpenAI `.pt` checkpoint and
as a Hugging Face Transformers directory load through the engine and transcribe identically;
broken checkpoints fail at load with an error that names the problem."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

from engine import ASREngine, CheckpointError, EngineConfig
from engine.admission import describe_model
from engine.config import embedded_checkpoint_dir
from engine.models.whisper.loader import hf_to_openai_name
from engine.models.whisper.model import Whisper
from tests.conftest import Clip

CLIPS = ("libri_2412-153948-0000", "mfa_words", "ps_cards_001")

# openai name pieces -> Transformers ones (the inverse of loader.hf_to_openai_name)
_ATTN = {"attn": "self_attn", "cross_attn": "encoder_attn"}
_PROJ = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "out": "out_proj"}
_BLOCK = {
    "attn_ln": "self_attn_layer_norm",
    "cross_attn_ln": "encoder_attn_layer_norm",
    "mlp_ln": "final_layer_norm",
    "mlp.0": "fc1",
    "mlp.2": "fc2",
}
_TOP = {
    "conv1": "conv1",
    "conv2": "conv2",
    "positional_embedding": "embed_positions",
    "token_embedding": "embed_tokens",
    "ln_post": "layer_norm",
    "ln": "layer_norm",
}


def openai_to_hf_name(name: str) -> str:
    side, rest = name.split(".", 1)
    if rest.startswith("blocks."):
        _, layer, tail = rest.split(".", 2)
        module, param = tail.rsplit(".", 1)
        if module.split(".")[0] in _ATTN and module not in _BLOCK:
            attn, proj = module.split(".")
            return f"model.{side}.layers.{layer}.{_ATTN[attn]}.{_PROJ[proj]}.{param}"
        return f"model.{side}.layers.{layer}.{_BLOCK[module]}.{param}"
    if rest == "positional_embedding":
        return f"model.{side}.embed_positions.weight"
    module, param = rest.rsplit(".", 1)
    return f"model.{side}.{_TOP[module]}.{param}"


@pytest.fixture(scope="module")
def embedded() -> dict[str, Any]:
    """The embedded checkpoint's float weights (as loaded, before any quantization) and side files."""
    from engine.models.whisper.loader import load_checkpoint

    ckpt = embedded_checkpoint_dir()
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    loaded = load_checkpoint(ckpt)
    model = Whisper(loaded.dims)
    model.load_state_dict(loaded.state_dict, strict=False)  # the encoder's sinusoids are computed
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    return {"dir": ckpt, "config": config, "state": state, "dims": asdict(loaded.dims)}


def _transcripts(ckpt_dir: str, clips: list[Clip]) -> tuple[list[str], str]:
    eng = ASREngine(EngineConfig(quantization="none", ckpt_dir=ckpt_dir))
    try:
        described = describe_model(EngineConfig(ckpt_dir=ckpt_dir))  # what /v1/models shows before a load
        assert described is not None and described.model == eng.model_info.model == "tiny.en"
        assert (described.checkpoint_format, described.capabilities) == (eng.runner.ckpt_format,
                                                                         eng.model_info.capabilities)
        return [o.text for o in eng.transcribe_outputs([c.audio for c in clips])], eng.runner.ckpt_format
    finally:
        eng.shutdown()


@pytest.fixture(scope="module")
def three(clips: list[Clip], greedy_alone: dict[str, Any]) -> tuple[list[Clip], list[str]]:
    by_id = {c.id: c for c in clips}
    picked = [by_id[i] for i in CLIPS]
    return picked, [greedy_alone[i].text for i in CLIPS]


def test_inverse_hf_mapping_round_trips(embedded: dict[str, Any]) -> None:
    for name in embedded["state"]:
        assert hf_to_openai_name(openai_to_hf_name(name)) == name


def test_openai_pt_checkpoint_transcribes_identically(
    tmp_path: Path, embedded: dict[str, Any], three: tuple[list[Clip], list[str]]
) -> None:
    torch.save({"dims": embedded["dims"], "model_state_dict": embedded["state"]}, tmp_path / "tiny.en.pt")
    for side in ("tokenizer.json", "config.json"):
        shutil.copy(os.path.join(embedded["dir"], side), tmp_path / side)
    texts, fmt = _transcripts(str(tmp_path), three[0])
    assert fmt == "openai"
    assert texts == three[1]


def test_huggingface_checkpoint_transcribes_identically(
    tmp_path: Path, embedded: dict[str, Any], three: tuple[list[Clip], list[str]]
) -> None:
    from safetensors.torch import save_file

    dims, ct2 = embedded["dims"], embedded["config"]
    tensors = {openai_to_hf_name(k): v for k, v in embedded["state"].items()}
    tensors["proj_out.weight"] = tensors["model.decoder.embed_tokens.weight"].clone()  # tied in HF
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "whisper",
        "architectures": ["WhisperForConditionalGeneration"],
        "num_mel_bins": dims["n_mels"],
        "max_source_positions": dims["n_audio_ctx"],
        "d_model": dims["n_audio_state"],
        "encoder_attention_heads": dims["n_audio_head"],
        "encoder_layers": dims["n_audio_layer"],
        "vocab_size": dims["n_vocab"],
        "max_target_positions": dims["n_text_ctx"],
        "decoder_attention_heads": dims["n_text_head"],
        "decoder_layers": dims["n_text_layer"],
    }))
    (tmp_path / "generation_config.json").write_text(json.dumps({
        "alignment_heads": ct2["alignment_heads"],
        "suppress_tokens": ct2["suppress_ids"],
        "begin_suppress_tokens": ct2["suppress_ids_begin"],
    }))
    shutil.copy(os.path.join(embedded["dir"], "tokenizer.json"), tmp_path / "tokenizer.json")
    texts, fmt = _transcripts(str(tmp_path), three[0])
    assert fmt == "huggingface"
    assert texts == three[1]


def _copy_embedded(tmp_path: Path, embedded: dict[str, Any]) -> Path:
    target = tmp_path / "ct2"
    shutil.copytree(embedded["dir"], target, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return target


@pytest.mark.parametrize("keep", [0.5, 0.999, 40])
def test_truncated_model_bin_is_a_checkpoint_error(tmp_path: Path, embedded: dict[str, Any], keep: float) -> None:
    target = _copy_embedded(tmp_path, embedded)
    model_bin = target / "model.bin"
    size = model_bin.stat().st_size
    with open(model_bin, "r+b") as f:
        f.truncate(int(size * keep) if keep < 1 else int(keep))
    with pytest.raises(CheckpointError, match=r"model\.bin.*truncated"):
        ASREngine(EngineConfig(quantization="none", ckpt_dir=str(target)))


def test_openai_checkpoint_missing_a_weight_names_it(tmp_path: Path, embedded: dict[str, Any]) -> None:
    state = dict(embedded["state"])
    del state["decoder.blocks.2.mlp.0.weight"]
    torch.save({"dims": embedded["dims"], "model_state_dict": state}, tmp_path / "broken.pt")
    shutil.copy(os.path.join(embedded["dir"], "tokenizer.json"), tmp_path / "tokenizer.json")
    with pytest.raises(CheckpointError, match=r"decoder\.blocks\.2\.mlp\.0\.weight"):
        ASREngine(EngineConfig(quantization="none", ckpt_dir=str(tmp_path)))


def test_openai_checkpoint_without_dims_is_refused(tmp_path: Path, embedded: dict[str, Any]) -> None:
    torch.save({"model_state_dict": embedded["state"]}, tmp_path / "nodims.pt")
    shutil.copy(os.path.join(embedded["dir"], "tokenizer.json"), tmp_path / "tokenizer.json")
    with pytest.raises(CheckpointError, match="'dims'"):
        ASREngine(EngineConfig(quantization="none", ckpt_dir=str(tmp_path)))


def test_directory_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(CheckpointError, match="no model family recognises"):
        ASREngine(EngineConfig(quantization="none", ckpt_dir=str(tmp_path)))


def test_missing_tokenizer_is_named(tmp_path: Path, embedded: dict[str, Any]) -> None:
    target = _copy_embedded(tmp_path, embedded)
    os.remove(target / "tokenizer.json")
    with pytest.raises(CheckpointError, match=r"tokenizer\.json"):
        ASREngine(EngineConfig(quantization="none", ckpt_dir=str(target)))


@pytest.mark.parametrize(("width", "vocab", "model", "languages"),
                         [(1280, 51866, "large", 100), (768, 51865, "small", 99), (512, 51864, "base.en", 1)])
def test_a_checkpoint_is_described_from_its_config_without_its_weights(
        tmp_path: Path, width: int, vocab: int, model: str, languages: int) -> None:
    """/v1/models describes a model before its first load from its configuration: here a
    Transformers config beside an empty weights file, which a load would refuse."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "whisper", "d_model": width, "vocab_size": vocab}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    info = describe_model(EngineConfig(ckpt_dir=str(tmp_path)))
    assert info is not None and info.model == model and len(info.languages) == languages
    multilingual = languages > 1
    assert info.capabilities.translate is info.capabilities.language is multilingual
    assert info.details["tasks"] == (["transcribe", "translate"] if multilingual else ["transcribe"])
