"""`oasr convert` / `oasr quantize` for Whisper: checkpoints in each source format, written by
that format's own writer (torch.save of openai's dict; Transformers' `save_pretrained`; the
embedded CTranslate2 model), converted to the native layout, load and decode to the same tokens
as the source; a quantized directory gives the tokens of online int8 and rounds nothing at load."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

from engine import ASREngine, EngineConfig
from engine.config import embedded_checkpoint_dir
from engine.convert import convert_checkpoint, quantize_checkpoint
from engine.errors import InvalidRequestError
from engine.models.whisper import int8, native
from engine.quantization import QuantizationConfig
from engine.types import DecodingOptions
from tests.conftest import Clip

CLIPS = ("mfa_words", "ps_cards_001")


@pytest.fixture(scope="module")
def two(clips: list[Clip]) -> list[Clip]:
    by_id = {c.id: c for c in clips}
    return [by_id[i] for i in CLIPS]


def _tokens(ckpt_dir: str | None, clips: list[Clip], decoding: DecodingOptions | None = None,
            **config: Any) -> tuple[list[list[int]], str, str]:
    """Tokens per clip, the checkpoint format read, and the scheme the layers ran in."""
    eng = ASREngine(EngineConfig(ckpt_dir=ckpt_dir, **{"quantization": "none", **config}))  # float32 unless named
    try:
        outs = eng.transcribe_outputs([c.audio for c in clips], decoding=decoding)
        assert all(o.finish_reason != "error" for o in outs), [o.error for o in outs]
        return [o.tokens for o in outs], eng.runner.ckpt_format, eng.runner.parts.quantization
    finally:
        eng.shutdown()


def test_openai_pt_converts_to_identical_tokens(tmp_path: Path, two: list[Clip]) -> None:
    from engine.models.whisper.loader import load_checkpoint
    from engine.models.whisper.model import Whisper

    loaded = load_checkpoint(embedded_checkpoint_dir())
    model = Whisper(loaded.dims)
    model.load_state_dict(loaded.state_dict, strict=False)  # the encoder's sinusoids are computed
    heads = torch.zeros(loaded.dims.n_text_layer, loaded.dims.n_text_head, dtype=torch.bool)
    for layer, head in loaded.alignment_heads:
        heads[layer, head] = True
    src = tmp_path / "openai"
    src.mkdir()
    # openai/whisper's checkpoint dict: dims, model_state_dict, and the alignment heads as a sparse mask
    torch.save({"dims": asdict(loaded.dims), "model_state_dict": model.state_dict(),
                "alignment_heads": heads.to_sparse()}, src / "tiny.en.pt")
    shutil.copy(os.path.join(embedded_checkpoint_dir(), "tokenizer.json"), src / "tokenizer.json")

    source, fmt, _ = _tokens(str(src), two)
    assert fmt == "openai"
    out = tmp_path / "native"
    assert convert_checkpoint(str(src / "tiny.en.pt"), str(out)).family == "whisper"  # a file names its directory
    assert sorted(os.listdir(out)) == sorted([native.MANIFEST, native.WEIGHTS, native.TOKENIZER])
    manifest = json.loads((out / native.MANIFEST).read_text())
    assert (manifest["family"], manifest["source_format"], manifest["quantization"]) == ("whisper", "openai", None)
    assert [tuple(h) for h in manifest["alignment_heads"]] == sorted(loaded.alignment_heads)
    converted, fmt, _ = _tokens(str(out), two)
    assert fmt == "oasr"
    assert all(source) and converted == source


def test_transformers_directory_converts_to_identical_tokens(tmp_path: Path, two: list[Clip]) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        vocab_size=51864, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256,
        max_source_positions=1500, max_target_positions=448)
    src = tmp_path / "hf"
    transformers.WhisperForConditionalGeneration(config).save_pretrained(src, safe_serialization=True)
    shutil.copy(os.path.join(embedded_checkpoint_dir(), "tokenizer.json"), src / "tokenizer.json")
    short = DecodingOptions(max_new_tokens=12)  # random weights: cap what they babble

    source, fmt, _ = _tokens(str(src), two, short)
    assert fmt == "huggingface"
    out = tmp_path / "native"
    convert_checkpoint(str(src), str(out))
    assert json.loads((out / native.MANIFEST).read_text())["source_format"] == "huggingface"
    converted, fmt, _ = _tokens(str(out), two, short)
    assert fmt == "oasr"
    assert all(source) and converted == source


def test_embedded_ctranslate2_converts_to_identical_tokens(tmp_path: Path, two: list[Clip]) -> None:
    source, fmt, _ = _tokens(None, two)
    assert fmt == "ctranslate2"
    out = tmp_path / "native"
    convert_checkpoint(embedded_checkpoint_dir(), str(out))
    converted, fmt, _ = _tokens(str(out), two)
    assert fmt == "oasr"
    assert all(source) and converted == source


def test_output_directory_is_checked(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(InvalidRequestError, match="not empty"):
        convert_checkpoint(embedded_checkpoint_dir(), str(tmp_path / "busy"))
    with pytest.raises(InvalidRequestError, match="is the source"):
        convert_checkpoint(embedded_checkpoint_dir(), embedded_checkpoint_dir())


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quantized") / "int8"
    quantize_checkpoint(embedded_checkpoint_dir(), str(out), QuantizationConfig.parse("int8_w8a8"))
    return out


@pytest.mark.slow  # ~50 s on a loaded 2-core VM: int8 decoding twice, emulated where the CPU lacks VNNI
def test_quantized_checkpoint_matches_online_int8_and_rounds_nothing_at_load(
        quantized: Path, two: list[Clip], monkeypatch: pytest.MonkeyPatch) -> None:
    rounded: list[tuple[int, ...]] = []
    real = int8.quantize_weight

    def counting(weight: torch.Tensor, qmax: int) -> tuple[torch.Tensor, torch.Tensor]:
        rounded.append(tuple(weight.shape))
        return real(weight, qmax)

    monkeypatch.setattr(int8, "quantize_weight", counting)
    online, _, scheme = _tokens(None, two, quantization="int8_w8a8")
    assert scheme == "int8_w8a8" and len(rounded) > 0  # online int8 rounds every layer at load
    rounded.clear()
    ahead, fmt, scheme = _tokens(str(quantized), two, quantization="auto")  # unset: follows the checkpoint
    assert (fmt, scheme) == ("oasr", "int8_w8a8")
    assert rounded == []
    assert all(online) and ahead == online
    manifest = json.loads((quantized / native.MANIFEST).read_text())
    assert manifest["quantization"] == {"scheme": "int8_w8a8", "weight_max": int8.weight_max(), "ignore": []}


def test_quantized_checkpoint_refuses_another_scheme(quantized: Path) -> None:
    for asked in ("none", {"scheme": "int8_w8a8", "ignore": "decoder.*"}):
        with pytest.raises(InvalidRequestError, match="quantized ahead of time"):
            ASREngine(EngineConfig(ckpt_dir=str(quantized), quantization=asked))
    with pytest.raises(InvalidRequestError, match="already quantized"):
        quantize_checkpoint(str(quantized), str(quantized.parent / "again"), QuantizationConfig.parse("int8_w8a8"))
