"""Must-show 4 and loading rules: unsupported config keys/values are refused naming the key, a
truncated archive fails clearly, checkpoint selection, untrained settings and request options."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from engine import ASREngine, EngineConfig
from engine.capabilities import check_capabilities
from engine.errors import CheckpointError, InvalidRequestError, UnsupportedError
from engine.models.nemo.options import buffered_presets, delay_preset
from engine.models.nemo.runner import NemoRunner
from engine.types import DecodingOptions
from tests.engine.nemo.conftest import FIXTURES, make_runner


def _rewrite_config(src: Path, dst: Path, edit: object) -> None:
    """Copy a .nemo, passing its model_config.yaml through `edit(config) -> None`."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w") as tout:
        for member in tin:
            data = tin.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name.endswith("model_config.yaml"):
                cfg = yaml.safe_load(data)
                edit(cfg)  # type: ignore[operator]
                data = yaml.safe_dump(cfg, allow_unicode=True).encode()
                member.size = len(data)
            tout.addfile(member, io.BytesIO(data) if data is not None else None)


def _edited(tmp_path: Path, edit: object) -> str:
    _rewrite_config(FIXTURES / "tdt" / "model.nemo", tmp_path / "model.nemo", edit)
    return str(tmp_path)


def test_abs_pos_attention_is_refused_naming_the_key(tmp_path: Path) -> None:
    ckpt_dir = _edited(tmp_path, lambda c: c["encoder"].update(self_attention_model="abs_pos"))
    with pytest.raises(CheckpointError, match=r"encoder\.self_attention_model='abs_pos'"):
        ASREngine(EngineConfig(ckpt_dir=ckpt_dir))


def test_made_up_key_is_refused_naming_the_key(tmp_path: Path) -> None:
    ckpt_dir = _edited(tmp_path, lambda c: c["encoder"].update(fancy_new_attention=True))
    with pytest.raises(CheckpointError, match=r"encoder\.fancy_new_attention"):
        ASREngine(EngineConfig(ckpt_dir=ckpt_dir))


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda c: c["preprocessor"].update(normalize="all_features"), r"preprocessor\.normalize"),
        (lambda c: c["encoder"].update(subsampling="vggnet"), r"encoder\.subsampling"),
        (lambda c: c["encoder"].update(conv_norm_type="group_norm4"), r"encoder\.conv_norm_type"),
        (lambda c: c["joint"]["jointnet"].update(activation="gelu"), r"joint\.jointnet\.activation"),
        (lambda c: c.update(target="nemo.collections.asr.models.EncDecMultiTaskModel"), r"target="),
    ],
)
def test_other_unsupported_values_are_refused(tmp_path: Path, edit: object, named: str) -> None:
    with pytest.raises(CheckpointError, match=named):
        make_runner("tdt", ckpt_dir=_edited(tmp_path, edit))


def test_truncated_archive_fails_clearly(tmp_path: Path) -> None:
    data = (FIXTURES / "tdt" / "model.nemo").read_bytes()
    (tmp_path / "model.nemo").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.nemo.*truncated"):
        ASREngine(EngineConfig(ckpt_dir=str(tmp_path)))


def test_checkpoint_name_picks_one_of_several(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "tdt" / "model.nemo", tmp_path / "tdt.nemo")
    shutil.copy(FIXTURES / "ctc_striding_bn" / "model.nemo", tmp_path / "ctc.nemo")
    with pytest.raises(CheckpointError, match=r"2 \.nemo files"):
        make_runner("tdt", ckpt_dir=str(tmp_path))
    runner = make_runner("tdt", ckpt_dir=str(tmp_path), checkpoint_name="ctc.nemo")
    assert runner.method == "ctc" and runner.info().model == "ctc"


def test_untrained_look_ahead_is_refused_naming_the_trained_ones() -> None:
    with pytest.raises(InvalidRequestError, match=r"trained: \[12, 3\] \(chunk_size=4, num_left_chunks=3\)"):
        make_runner("hybrid_cache_aware", chunk_size=3, num_left_chunks=4)
    assert make_runner("hybrid_cache_aware", chunk_size=2, num_left_chunks=6).look_ahead == (12, 1)
    assert make_runner("hybrid_cache_aware").look_ahead == (12, 3)  # engine defaults: the model's default


def test_decode_method_must_exist() -> None:
    with pytest.raises(InvalidRequestError, match=r"decode_method 'ctc' is not offered by this nemo model \(it offers: rnnt\)"):
        make_runner("tdt", decode_method="ctc")


def test_request_options_are_checked() -> None:
    buffered = make_runner("unified_rc")
    with pytest.raises(InvalidRequestError, match=r"chunk=3 frames is not trained.*chunk in \[1, 2, 4\]"):
        buffered.check_options(DecodingOptions(stream_context=(10, 3, 4)), streaming=True)
    buffered.check_options(DecodingOptions(stream_context=(10, 1, 4)), streaming=True)


def _admit(runner: NemoRunner, options: DecodingOptions) -> None:
    """Admission's check of the runner's declared capabilities (engine/capabilities.py)."""
    info = runner.info()
    check_capabilities(info.capabilities, family=info.family, model=info.model, languages=info.languages,
                       options=options)  # fmt: skip


def test_capabilities_follow_the_decoder() -> None:
    """CTC heads and transducers (RNN-T and TDT) beam-search with n-best and keywords; only a
    buffered checkpoint takes a stream_context."""
    rnnt, ctc, tdt = make_runner("hybrid_cache_aware"), make_runner("hybrid_cache_aware", decode_method="ctc"), \
        make_runner("tdt")  # fmt: skip
    caps = {r.method + ("-tdt" if r is tdt else ""): r.info().capabilities for r in (rnnt, ctc, tdt)}
    assert {k: (c.max_beam_size, c.max_n_best, c.keywords) for k, c in caps.items()} == {
        "rnnt": (16, 16, True), "ctc": (10, 10, True), "rnnt-tdt": (16, 16, True)}  # fmt: skip
    assert not caps["rnnt"].stream_context and make_runner("unified_rc").info().capabilities.stream_context
    _admit(rnnt, DecodingOptions(beam_size=4, n_best=4, keywords=("hello",)))
    with pytest.raises(UnsupportedError, match=r"beam_size is not supported.*largest beam is 16"):
        _admit(rnnt, DecodingOptions(beam_size=17))
    _admit(tdt, DecodingOptions(beam_size=4, keywords=("hello",)))
    with pytest.raises(UnsupportedError, match=r"n_best is not supported.*at most 10"):
        _admit(ctc, DecodingOptions(beam_size=10, n_best=11))


def test_delay_maps_to_presets() -> None:
    runner = make_runner("unified_rc")
    presets = buffered_presets(runner.ckpt.config.encoder)
    assert presets == [(10, 1, 1), (10, 2, 2), (10, 4, 4)]
    assert [delay_preset(presets, d) for d in ("minimal", "low", "medium", "high", "xhigh")] == [
        (10, 1, 1), (10, 2, 2), (10, 2, 2), (10, 4, 4), (10, 4, 4)
    ]  # fmt: skip
    assert runner.default_context == (10, 2, 2)
    info = runner.info().details["stream_settings"]
    assert info["style"] == "buffered" and info["delays"]["minimal"] == [10, 1, 1]


def test_the_nemo_language_option_declares_the_checkpoints_language() -> None:
    plain = make_runner("ctc_striding_bn").info()
    assert plain.languages == ()
    info = make_runner("ctc_striding_bn", family_options={"nemo": {"language": "en"}}).info()
    assert info.languages == ("en",)
    check_capabilities(info.capabilities, family=info.family, model=info.model, languages=info.languages,
                       options=DecodingOptions(language="en"))
