"""`oasr convert` of a `.nemo` (the fixtures NeMo itself wrote): the unpacked directory loads with
no tar and decodes every clip to the same tokens as the archive."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine import ASREngine, EngineConfig
from engine.convert import convert_checkpoint
from engine.families import resolve_family
from engine.models.nemo import native
from tests.engine.nemo.conftest import FIXTURES, NAMES, clip, reference


def _tokens(ckpt_dir: str, name: str) -> tuple[list[list[int]], str]:
    eng = ASREngine(EngineConfig(ckpt_dir=ckpt_dir))
    try:
        audios = [clip(name, clip_id) for clip_id in reference(name)["clips"]]
        return [o.tokens for o in eng.transcribe_outputs(audios)], eng.runner.info().model
    finally:
        eng.shutdown()


@pytest.mark.parametrize("name", NAMES)
def test_unpacked_nemo_decodes_like_the_archive(tmp_path: Path, name: str) -> None:
    out = tmp_path / "native"
    assert convert_checkpoint(str(FIXTURES / name / "model.nemo"), str(out)).family == "nemo"
    assert not any(f.endswith(".nemo") for f in os.listdir(out))
    assert json.loads((out / native.MANIFEST).read_text())["family"] == "nemo"
    assert resolve_family(str(out)).name == "nemo"
    source, source_name = _tokens(str(FIXTURES / name), name)
    unpacked, unpacked_name = _tokens(str(out), name)
    assert any(source) and unpacked == source
    assert unpacked_name == source_name  # /v1/models names the model as the archive did
