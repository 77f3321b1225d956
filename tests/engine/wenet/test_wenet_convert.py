"""`oasr convert` of a WeNet directory: OASR's layout (safetensors, CMVN folded in) loads with no
pickle and no CMVN file and computes what the source does, rescoring decoder included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from engine.convert import convert_checkpoint
from engine.errors import CheckpointError
from engine.families import resolve_family
from engine.models.wenet import native
from engine.models.wenet.checkpoint import load_checkpoint
from engine.models.wenet.testing import CheckpointSpec, write_checkpoint

CPU = torch.device("cpu")


@pytest.mark.parametrize("cmvn", ["kaldi", "json"])
def test_converted_wenet_computes_what_the_source_does(tmp_path: Path, cmvn: str) -> None:
    src = write_checkpoint(str(tmp_path / "src"), CheckpointSpec(cmvn=cmvn, with_decoder=True))
    out = tmp_path / "native"
    assert convert_checkpoint(src, str(out)).family == "wenet"
    assert sorted(os.listdir(out)) == ["model.safetensors", "oasr.json", "train.yaml", "units.txt"]
    assert json.loads((out / native.MANIFEST).read_text())["family"] == "wenet"
    assert resolve_family(str(out)).name == "wenet"
    a, b = load_checkpoint(src, CPU, torch.float32), load_checkpoint(str(out), CPU, torch.float32)
    assert b.weights_path.endswith("model.safetensors") and b.units == a.units
    assert a.decoder is not None and b.decoder is not None
    feats = torch.randn(1, 97, 80, generator=torch.Generator().manual_seed(0)) * 3 + 10
    lengths = torch.tensor([97])
    torch.testing.assert_close(b.model.forward_full(feats, lengths, 8, -1)[0],
                               a.model.forward_full(feats, lengths, 8, -1)[0], rtol=0, atol=0)
    for (ka, va), (kb, vb) in zip(sorted(a.decoder.state_dict().items()), sorted(b.decoder.state_dict().items())):
        assert ka == kb and torch.equal(va, vb)


def test_a_converted_directory_is_not_converted_again(tmp_path: Path) -> None:
    src = write_checkpoint(str(tmp_path / "src"))
    convert_checkpoint(src, str(tmp_path / "a"))
    with pytest.raises(CheckpointError, match="already in OASR's WeNet layout"):
        convert_checkpoint(str(tmp_path / "a"), str(tmp_path / "b"))
