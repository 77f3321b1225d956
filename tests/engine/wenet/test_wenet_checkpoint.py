"""Loading WeNet checkpoint directories in their real variants, and refusing broken ones by name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from engine.errors import CheckpointError
from engine.families import resolve_family
from engine.models.wenet import FAMILY
from engine.models.wenet.checkpoint import load_checkpoint, load_cmvn
from engine.models.wenet.config import detect
from engine.models.wenet.testing import CheckpointSpec, write_checkpoint

CPU = torch.device("cpu")


def log_probs(ckpt_dir: str) -> torch.Tensor:
    model = load_checkpoint(ckpt_dir, CPU, torch.float32).model
    feats = torch.randn(1, 123, 80, generator=torch.Generator().manual_seed(0)) * 3 + 10
    return model.forward_full(feats, torch.tensor([123]), 8, -1)[0]


@pytest.mark.parametrize(
    "variant",
    [
        {"cmvn": "kaldi"},
        {"cmvn": "state_dict", "include_pe": False},
        {"cmvn": "both", "yaml_flavour": "v3"},
        {"cmvn": "json", "yaml_flavour": "v3", "with_decoder": True, "include_pe": False},
    ],
)
def test_export_variants_load_to_the_same_model(tmp_path: Path, variant: dict) -> None:
    reference = log_probs(write_checkpoint(str(tmp_path / "ref"), CheckpointSpec(cmvn="json")))
    got = log_probs(write_checkpoint(str(tmp_path / "v"), CheckpointSpec(**variant)))
    torch.testing.assert_close(got, reference, rtol=0, atol=1e-4)  # Kaldi text CMVN is printed to 6 digits


def test_detected_and_registered(tmp_path: Path) -> None:
    ckpt = write_checkpoint(str(tmp_path / "c"))
    shutil.copy(os.path.join(ckpt, "final.pt"), os.path.join(ckpt, "avg.pt"))  # an experiment dir
    assert detect(ckpt) and resolve_family(ckpt) is FAMILY
    assert load_checkpoint(ckpt, CPU, torch.float32).weights_path.endswith("final.pt")
    os.remove(os.path.join(ckpt, "units.txt"))
    assert not detect(ckpt)


def test_no_cmvn_anywhere_means_raw_features(tmp_path: Path) -> None:
    ckpt = load_checkpoint(
        write_checkpoint(str(tmp_path / "c"), CheckpointSpec(cmvn="none")), CPU, torch.float32
    )
    assert ckpt.model.encoder.global_cmvn is None


def test_cmvn_json_and_kaldi_text_agree(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(
        json.dumps({"mean_stat": [20.0, 40.0], "var_stat": [500.0, 1700.0], "frame_num": 2})
    )
    (tmp_path / "a.kaldi").write_text(" [\n 20 40 2\n 500 1700 0 ]\n")
    for path in (tmp_path / "a.json", tmp_path / "a.kaldi"):
        mean, istd = load_cmvn(str(path))
        torch.testing.assert_close(mean, torch.tensor([10.0, 20.0]))
        torch.testing.assert_close(istd, torch.tensor([150.0, 450.0]).rsqrt())


def _edit_yaml(ckpt: str, edit) -> None:
    path = os.path.join(ckpt, "train.yaml")
    conf = yaml.safe_load(Path(path).read_text())
    edit(conf)
    with open(path, "w") as f:
        yaml.safe_dump(conf, f)


def _append(ckpt: str, name: str, text: str) -> None:
    with open(os.path.join(ckpt, name), "a") as f:
        f.write(text)


def _edit_state_dict(ckpt: str, edit) -> None:
    path = os.path.join(ckpt, "final.pt")
    sd = torch.load(path, weights_only=True)
    edit(sd)
    torch.save(sd, path)


BROKEN = {
    "missing key": (lambda c: _edit_state_dict(c, lambda sd: sd.pop("encoder.encoders.1.self_attn.linear_pos.weight")),
                    "encoder.encoders.1.self_attn.linear_pos.weight"),
    "unexpected key": (lambda c: _edit_state_dict(c, lambda sd: sd.__setitem__("encoder.extra.weight", torch.ones(1))),
                       "encoder.extra.weight"),
    "shape": (lambda c: _edit_yaml(c, lambda y: y["encoder_conf"].__setitem__("linear_units", 96)),
              "encoder.encoders.0.feed_forward.w_1.weight"),
    "layers": (lambda c: _edit_yaml(c, lambda y: y["encoder_conf"].__setitem__("num_blocks", 3)),
               "encoder.encoders.2"),
    "output_dim": (lambda c: _edit_yaml(c, lambda y: y.__setitem__("output_dim", 99)), "output_dim"),
    "non-causal": (lambda c: _edit_yaml(c, lambda y: y["encoder_conf"].__setitem__("causal", False)),
                   "encoder_conf.causal"),
    "input layer": (lambda c: _edit_yaml(c, lambda y: y["encoder_conf"].__setitem__("input_layer", "conv2d6")),
                    "encoder_conf.input_layer"),
    "abs pos": (lambda c: _edit_yaml(c, lambda y: y["encoder_conf"].__setitem__("pos_enc_layer_type", "abs_pos")),
                "pos_enc_layer_type"),
    "cmvn file": (lambda c: os.remove(os.path.join(c, "global_cmvn")), "global_cmvn"),
    "units gap": (lambda c: _append(c, "units.txt", "<extra> 99\n"), "units.txt"),
    "units line": (lambda c: _append(c, "units.txt", "oops\n"), "units.txt"),
    "corrupt pt": (lambda c: (Path(c) / "final.pt").write_bytes(b"not a zip"), "final.pt"),
    "bad yaml": (lambda c: (Path(c) / "train.yaml").write_text("encoder_conf: [1, 2\n"), "train.yaml"),
}  # fmt: skip


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_checkpoint(str(tmp_path_factory.mktemp("pristine") / "c"))


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_checkpoint_names_the_offender(tmp_path: Path, pristine: str, case: str) -> None:
    ckpt = str(tmp_path / "c")
    shutil.copytree(pristine, ckpt)
    breaker, named = BROKEN[case]
    breaker(ckpt)
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        load_checkpoint(ckpt, CPU, torch.float32)


def test_decoder_is_loaded_strictly(tmp_path: Path) -> None:
    ckpt = write_checkpoint(str(tmp_path / "c"), CheckpointSpec(with_decoder=True))
    assert load_checkpoint(ckpt, CPU, torch.float32).has_decoder
    _edit_state_dict(ckpt, lambda sd: sd.pop("decoder.right_decoder.decoders.0.src_attn.linear_v.bias"))
    with pytest.raises(
        CheckpointError, match=r"decoder\.right_decoder\.decoders\.0\.src_attn\.linear_v\.bias"
    ):
        load_checkpoint(ckpt, CPU, torch.float32)


def test_unsupported_decoder_kind_turns_rescoring_off(tmp_path: Path) -> None:
    ckpt = write_checkpoint(str(tmp_path / "c"), CheckpointSpec(with_decoder=True))
    _edit_yaml(ckpt, lambda y: y.__setitem__("decoder", "transducer"))
    assert not load_checkpoint(ckpt, CPU, torch.float32).has_decoder


def test_fbank_window_type_is_read_and_other_feature_types_refused(tmp_path: Path) -> None:
    """WeNet 3.x's compute_fbank takes fbank_conf.window_type (povey by default); dataset_conf.
    feats_type may name mfcc or log_mel_spectrogram, which this runtime does not compute."""
    ckpt = write_checkpoint(str(tmp_path / "c"))
    path = os.path.join(ckpt, "train.yaml")
    conf = yaml.safe_load(Path(path).read_text())
    assert load_checkpoint(ckpt, CPU, torch.float32).fbank.window_type == "povey"
    conf["dataset_conf"]["fbank_conf"]["window_type"] = "hamming"
    Path(path).write_text(yaml.safe_dump(conf))
    assert load_checkpoint(ckpt, CPU, torch.float32).fbank.window_type == "hamming"
    conf["dataset_conf"]["feats_type"] = "mfcc"
    Path(path).write_text(yaml.safe_dump(conf))
    with pytest.raises(CheckpointError, match="feats_type 'mfcc'"):
        load_checkpoint(ckpt, CPU, torch.float32)


def test_sos_and_eos_come_from_the_tokenizer_s_special_tokens(tmp_path: Path) -> None:
    """WeNet 3.x records `tokenizer_conf.special_tokens` (its aishell u2++ recipe: <sos> = <eos> = 2)
    and its ASRModel takes sos/eos from there, else the last unit."""
    ckpt = write_checkpoint(str(tmp_path / "c"), CheckpointSpec(with_decoder=True))
    last = len(load_checkpoint(ckpt, CPU, torch.float32).units) - 1
    assert (load_checkpoint(ckpt, CPU, torch.float32).sos, load_checkpoint(ckpt, CPU, torch.float32).eos) == (last, last)
    path = Path(ckpt, "train.yaml")
    conf = yaml.safe_load(path.read_text())
    conf["tokenizer_conf"] = {"special_tokens": {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}}
    path.write_text(yaml.safe_dump(conf))
    loaded = load_checkpoint(ckpt, CPU, torch.float32)
    assert (loaded.sos, loaded.eos) == (2, 2)
    conf["tokenizer_conf"]["special_tokens"]["<eos>"] = last + 1
    path.write_text(yaml.safe_dump(conf))
    with pytest.raises(CheckpointError, match="<eos>"):
        load_checkpoint(ckpt, CPU, torch.float32)
