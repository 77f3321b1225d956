"""The converted-weights cache (engine/models/whisper/weights_cache.py) on the embedded tiny.en:
a second load reads the cache and gives the same tensors and facts as converting model.bin; an
edited checkpoint is converted afresh; an unwritable cache only costs the conversion."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig, embedded_checkpoint_dir
from engine.models.whisper import weights_cache
from engine.models.whisper.build import build_model
from engine.models.whisper.loader import load_checkpoint


@pytest.fixture
def ckpt_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A copy of the embedded checkpoint (its mtime ours to change) and an empty cache."""
    monkeypatch.setenv(weights_cache.CACHE_ENV, str(tmp_path / "cache"))
    target = tmp_path / "tiny.en"
    shutil.copytree(embedded_checkpoint_dir(), target)
    return str(target)


def test_second_load_reads_the_cache_and_matches_the_conversion(ckpt_dir: str) -> None:
    converted = load_checkpoint(ckpt_dir)
    assert weights_cache.load(ckpt_dir) is None
    weights_cache.store(ckpt_dir, converted)
    cached = weights_cache.load(ckpt_dir)
    assert cached is not None
    assert cached.dims == converted.dims and cached.alignment_heads == converted.alignment_heads
    assert (cached.suppress_ids, cached.suppress_ids_begin, cached.lang_ids) == (
        converted.suppress_ids, converted.suppress_ids_begin, converted.lang_ids)
    assert cached.tokenizer_file == converted.tokenizer_file
    transposed = cached.state_dict.pop(weights_cache.TRANSPOSED_EMBEDDING)
    assert cached.state_dict.keys() == converted.state_dict.keys()
    for name, tensor in converted.state_dict.items():
        assert torch.equal(cached.state_dict[name], tensor), name
    assert transposed.is_contiguous() and torch.equal(transposed, converted.state_dict["decoder.token_embedding.weight"].t())


def test_build_model_uses_and_fills_the_cache(ckpt_dir: str) -> None:
    config = EngineConfig(ckpt_dir=ckpt_dir, quantization="none")
    first, _, _ = build_model(ckpt_dir, config, torch.device("cpu"), torch.float32)
    entries = list(weights_cache.cache_root().glob("*.safetensors"))
    assert len(entries) == 1
    second, ckpt, _ = build_model(ckpt_dir, config, torch.device("cpu"), torch.float32)
    assert ckpt.format == "ctranslate2"
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name
    # the logits' transposed embedding: transposed at the first build, read from the cache at the second
    assert ckpt.state_dict.get(weights_cache.TRANSPOSED_EMBEDDING) is None  # taken out of the state dict
    assert torch.equal(first.decoder.output_weight_kn, second.decoder.output_weight_kn)


def test_an_edited_checkpoint_is_converted_afresh(ckpt_dir: str) -> None:
    weights_cache.store(ckpt_dir, load_checkpoint(ckpt_dir))
    model_bin = os.path.join(ckpt_dir, "model.bin")
    st = os.stat(model_bin)
    os.utime(model_bin, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert weights_cache.load(ckpt_dir) is None


def test_an_unwritable_cache_costs_only_the_conversion(ckpt_dir: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be")
    monkeypatch.setenv(weights_cache.CACHE_ENV, str(blocker))
    converted = load_checkpoint(ckpt_dir)
    assert weights_cache.store(ckpt_dir, converted) is converted
    assert weights_cache.load(ckpt_dir) is None
