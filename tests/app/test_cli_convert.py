"""`oasr convert` and `oasr quantize` through the command line: output line, the written layout,
and one-line errors with exit code 1 for what cannot be converted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import EXIT_FAILURE, EXIT_OK, main
from engine.config import embedded_checkpoint_dir

NEMO_TDT = Path(__file__).resolve().parents[1] / "fixtures" / "nemo" / "tdt" / "model.nemo"


def test_convert_prints_family_and_writes_the_native_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tdt"
    assert main(["convert", str(NEMO_TDT), str(out)]) == EXIT_OK
    assert capsys.readouterr().out == f"{NEMO_TDT}\tnemo\t{out}\n"
    assert json.loads((out / "oasr.json").read_text())["family"] == "nemo"


def test_quantize_writes_int8_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from safetensors import safe_open

    out = tmp_path / "int8"
    assert main(["quantize", embedded_checkpoint_dir(), str(out), "--ignore", "encoder.blocks.0.*"]) == EXIT_OK
    assert capsys.readouterr().out.endswith(f"\twhisper\t{out}\n")
    quantization = json.loads((out / "oasr.json").read_text())["quantization"]
    assert quantization["scheme"] == "int8_w8a8" and quantization["ignore"] == ["encoder.blocks.0.*"]
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert "encoder.blocks.1.mlp.0.weight_int8" in names and "encoder.blocks.1.mlp.0.weight" not in names
    assert "encoder.blocks.0.mlp.0.weight" in names  # ignored: kept in float
    assert "decoder.output_projection.weight_int8" in names


def test_quantize_refuses_a_family_without_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quantize", str(NEMO_TDT), str(tmp_path / "x")]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert err.startswith("oasr quantize: error: nemo checkpoints have no `oasr quantize`: its runner computes in "
                          "float only") and err.count("\n") == 1


def test_convert_refuses_a_family_without_it_saying_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zipformer = Path(__file__).resolve().parents[1] / "fixtures" / "zipformer" / "tiny_streaming"
    assert main(["convert", str(zipformer), str(tmp_path / "x")]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert err.startswith("oasr convert: error: zipformer checkpoints have no `oasr convert`: icefall's pretrained.pt")
    assert "(offered for: " in err and "wenet" in err and err.count("\n") == 1


def test_every_family_offers_convert_and_quantize_or_says_why_not() -> None:
    from engine.families import family_names, load_family

    for name in family_names():
        family = load_family(name)
        if name == "fake":  # the tests' stand-in family
            continue
        assert family.convert is not None or family.not_converted, name
        assert family.quantize is not None or family.not_quantized, name


def test_convert_refuses_an_unrecognised_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "notes.txt").write_text("not a model")
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "out")]) == EXIT_FAILURE
    assert "no model family recognises" in capsys.readouterr().err
