"""Loading a WeNet checkpoint directory: train.yaml, a .pt state dict, units.txt, global_cmvn.

Both yaml flavours are read: WeNet 2.x (`cmvn_file`, `is_json_cmvn` at the top) and 3.x
(`cmvn_conf`, `tokenizer_conf`). Training-only settings (dither, spec_aug, dropout, optim)
are ignored. Anything the runtime cannot reproduce exactly fails here, naming the key or file.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
import yaml

from engine.errors import CheckpointError
from engine.fbank import FbankOptions
from engine.models.wenet.decoder import DecoderConfig, build_decoder
from engine.models.wenet.model import ConformerConfig, ConformerCTC

logger = logging.getLogger(__name__)

CONFIG_FILE = "train.yaml"
UNITS_FILE = "units.txt"
PREFERRED_WEIGHTS = ("final.pt", "avg.pt")

# encoder_conf values this runtime implements; any other value is refused at load.
_REQUIRED: dict[str, object] = {
    "input_layer": "conv2d",
    "pos_enc_layer_type": "rel_pos",
    "selfattention_layer_type": "rel_selfattn",
    "query_bias": True,
    "key_bias": True,
    "value_bias": True,
    "conv_bias": True,
    "layer_norm_type": "layer_norm",
}
_DECODER_PREFIX = "decoder."
_DECODER_KINDS = ("transformer", "bitransformer")


@dataclass
class WenetCheckpoint:
    model: ConformerCTC
    config: ConformerConfig
    units: list[str]
    fbank: FbankOptions
    weights_path: str
    decoder: torch.nn.Module | None
    """The attention decoder for rescoring, when the checkpoint has a supported one."""
    reverse_weight: float
    """model_conf.reverse_weight: share of the right-to-left decoder in U2++ rescoring."""

    @property
    def has_decoder(self) -> bool:
        return self.decoder is not None


def weights_file(ckpt_dir: str, checkpoint_name: str | None = None) -> str | None:
    """The .pt state dict of a checkpoint dir: `checkpoint_name` when given, else final.pt /
    avg.pt, else the only .pt there."""
    if checkpoint_name is not None:
        path = os.path.join(ckpt_dir, checkpoint_name)
        return path if checkpoint_name.endswith(".pt") and os.path.isfile(path) else None
    try:
        names = sorted(n for n in os.listdir(ckpt_dir) if n.endswith(".pt"))
    except OSError:
        return None
    for name in PREFERRED_WEIGHTS:
        if name in names:
            return os.path.join(ckpt_dir, name)
    avg = [n for n in names if n.startswith("avg")]
    if len(avg) == 1:
        return os.path.join(ckpt_dir, avg[0])
    return os.path.join(ckpt_dir, names[0]) if len(names) == 1 else None


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    """A WeNet dir: train.yaml + units.txt + a .pt state dict (`checkpoint_name`, when given)."""
    if not (os.path.isfile(os.path.join(ckpt_dir, CONFIG_FILE)) and os.path.isfile(os.path.join(ckpt_dir, UNITS_FILE))):
        return False
    if checkpoint_name is not None:
        return checkpoint_name.endswith(".pt")
    return any(n.endswith(".pt") for n in os.listdir(ckpt_dir))


def load_units(path: str) -> list[str]:
    units: dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or not parts[1].isdigit():
                raise CheckpointError(f"{path}:{lineno}: expected '<unit> <id>', got {line.strip()!r}")
            units[int(parts[1])] = parts[0]
    if sorted(units) != list(range(len(units))):
        raise CheckpointError(f"{path}: unit ids are not 0..{len(units) - 1} without gaps")
    return [units[i] for i in range(len(units))]


def load_cmvn(path: str, is_json: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, istd) from WeNet JSON `{mean_stat, var_stat, frame_num}` or Kaldi text stats
    (2 x (D+1): sums + count, sums of squares + 0)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise CheckpointError(f"cannot read CMVN file {path!r}: {exc}") from exc
    if is_json is None:
        is_json = text.lstrip().startswith("{")
    try:
        if is_json:
            stats = json.loads(text)
            sums = torch.tensor(stats["mean_stat"], dtype=torch.float64)
            sq = torch.tensor(stats["var_stat"], dtype=torch.float64)
            count = float(stats["frame_num"])
        else:
            nums = [float(t) for t in text.replace("[", " ").replace("]", " ").split()]
            dim = len(nums) // 2 - 1
            sums, count = torch.tensor(nums[:dim], dtype=torch.float64), nums[dim]
            sq = torch.tensor(nums[dim + 1 : 2 * dim + 1], dtype=torch.float64)
    except (KeyError, ValueError, TypeError) as exc:
        raise CheckpointError(f"malformed CMVN file {path!r}: {exc!r}") from exc
    if count <= 0 or sums.shape != sq.shape:
        raise CheckpointError(
            f"malformed CMVN file {path!r}: frame count {count}, dims {sums.shape} vs {sq.shape}"
        )
    mean = sums / count
    var = (sq / count - mean.square()).clamp_min(1e-20)  # WeNet's floor
    return mean.float(), var.rsqrt().float()


def _resolve(ckpt_dir: str, path: str) -> str:
    """Training-time paths rarely exist where the checkpoint is served; fall back to the dir."""
    for candidate in (path, os.path.join(ckpt_dir, path), os.path.join(ckpt_dir, os.path.basename(path))):
        if os.path.isfile(candidate):
            return candidate
    return path


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            conf = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from exc
    if not isinstance(conf, dict):
        raise CheckpointError(f"{path}: expected a mapping at the top level")
    return conf


def parse_config(conf: dict[str, Any], vocab_size: int, where: str) -> tuple[ConformerConfig, FbankOptions]:
    if conf.get("encoder", "conformer") != "conformer":
        raise CheckpointError(f"{where}: encoder {conf.get('encoder')!r} is not supported (only 'conformer')")
    enc = conf.get("encoder_conf") or {}
    for key, want in _REQUIRED.items():
        if key in enc and enc[key] != want:
            raise CheckpointError(
                f"{where}: encoder_conf.{key}={enc[key]!r} is not supported (need {want!r})"
            )
    use_cnn = bool(enc.get("use_cnn_module", True))
    if use_cnn and not enc.get("causal", False):
        raise CheckpointError(
            f"{where}: encoder_conf.causal is false; chunked streaming needs a causal convolution module"
        )
    if int((conf.get("ctc_conf") or {}).get("ctc_blank_id", 0)) != 0:
        raise CheckpointError(f"{where}: ctc_conf.ctc_blank_id must be 0")
    dataset = conf.get("dataset_conf") or {}
    fb = dataset.get("fbank_conf") or {}
    sample_rate = int((dataset.get("resample_conf") or {}).get("resample_rate", 16000))
    input_dim = int(conf.get("input_dim", fb.get("num_mel_bins", 80)))
    fbank = FbankOptions(
        sample_rate=sample_rate,
        num_mel_bins=int(fb.get("num_mel_bins", input_dim)),
        frame_length_ms=float(fb.get("frame_length", 25)),
        frame_shift_ms=float(fb.get("frame_shift", 10)),
    )  # dither / spec_aug are training-time augmentation: ignored
    if fbank.num_mel_bins != input_dim:
        raise CheckpointError(
            f"{where}: fbank_conf.num_mel_bins {fbank.num_mel_bins} != input_dim {input_dim}"
        )
    output_dim = int(conf.get("output_dim", vocab_size))
    if output_dim != vocab_size:
        raise CheckpointError(f"{where}: output_dim {output_dim} != {vocab_size} units in {UNITS_FILE}")
    try:
        cfg = ConformerConfig(
            input_dim=input_dim,
            vocab_size=vocab_size,
            output_size=int(enc.get("output_size", 256)),
            attention_heads=int(enc.get("attention_heads", 4)),
            linear_units=int(enc.get("linear_units", 2048)),
            num_blocks=int(enc.get("num_blocks", 6)),
            cnn_module_kernel=int(enc.get("cnn_module_kernel", 15)),
            cnn_module_norm=str(enc.get("cnn_module_norm", "batch_norm")),
            macaron_style=bool(enc.get("macaron_style", True)),
            use_cnn_module=use_cnn,
            normalize_before=bool(enc.get("normalize_before", True)),
            activation_type=str(enc.get("activation_type", "swish")),
            norm_eps=float(enc.get("norm_eps", 1e-5)),
        )
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: bad encoder_conf value: {exc}") from exc
    if cfg.output_size % cfg.attention_heads:
        raise CheckpointError(f"{where}: encoder_conf.output_size not divisible by attention_heads")
    if cfg.cnn_module_norm not in ("batch_norm", "layer_norm"):
        raise CheckpointError(
            f"{where}: encoder_conf.cnn_module_norm {cfg.cnn_module_norm!r} is not supported"
        )
    if cfg.activation_type not in ("swish", "relu", "gelu", "tanh"):
        raise CheckpointError(
            f"{where}: encoder_conf.activation_type {cfg.activation_type!r} is not supported"
        )
    return cfg, fbank


def _cmvn_file(conf: dict[str, Any]) -> tuple[str | None, bool | None]:
    cmvn_conf = conf.get("cmvn_conf") or {}
    path = cmvn_conf.get("cmvn_file") or conf.get("cmvn_file")
    is_json = cmvn_conf.get("is_json_cmvn", conf.get("is_json_cmvn"))
    return path, (None if is_json is None else bool(is_json))


def _read_state_dict(path: str) -> dict[str, torch.Tensor]:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt file
        raise CheckpointError(f"cannot load state dict {path!r}: {exc}") from exc
    for wrapper in ("model", "state_dict"):  # some exports nest the weights
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            obj = obj[wrapper]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path}: expected a state dict of tensors")
    return {k.removeprefix("module."): v for k, v in obj.items()}


def load_checkpoint(
    ckpt_dir: str, device: torch.device, dtype: torch.dtype, checkpoint_name: str | None = None
) -> WenetCheckpoint:
    yaml_path = os.path.join(ckpt_dir, CONFIG_FILE)
    conf = _read_yaml(yaml_path)
    units_path = _resolve(
        ckpt_dir, ((conf.get("tokenizer_conf") or {}).get("symbol_table_path") or UNITS_FILE)
    )
    if not os.path.isfile(units_path):
        units_path = os.path.join(ckpt_dir, UNITS_FILE)
    units = load_units(units_path)
    cfg, fbank = parse_config(conf, len(units), yaml_path)
    weights = weights_file(ckpt_dir, checkpoint_name)
    if weights is None:
        if checkpoint_name is not None:
            raise CheckpointError(f"{ckpt_dir}: checkpoint_name {checkpoint_name!r} is not a .pt state dict there")
        raise CheckpointError(f"{ckpt_dir}: no final.pt/avg.pt and not exactly one .pt state dict; set checkpoint_name")
    sd = _read_state_dict(weights)
    # Fixed sinusoid tables (`*.pe`) are rebuilt on the fly, whatever their length.
    sd = {k: v for k, v in sd.items() if not (k.endswith(".pe") and ".embed." in f".{k}")}
    decoder_sd = {k[len(_DECODER_PREFIX) :]: v for k, v in sd.items() if k.startswith(_DECODER_PREFIX)}
    sd = {k: v for k, v in sd.items() if not k.startswith(_DECODER_PREFIX)}
    decoder = _load_decoder(conf, cfg, decoder_sd, weights) if decoder_sd else None
    cmvn_path, is_json = _cmvn_file(conf)
    with_cmvn = "encoder.global_cmvn.mean" in sd or cmvn_path is not None
    model = ConformerCTC(cfg, with_cmvn=with_cmvn)
    if "encoder.global_cmvn.mean" not in sd and cmvn_path is not None:
        mean, istd = load_cmvn(_resolve(ckpt_dir, cmvn_path), is_json)
        sd["encoder.global_cmvn.mean"], sd["encoder.global_cmvn.istd"] = mean, istd
    _check_keys(model.state_dict(), sd, weights)
    model.load_state_dict(sd)
    model.eval().to(device=device, dtype=dtype)
    if model.encoder.global_cmvn is not None:
        model.encoder.global_cmvn.float()  # normalize fbank in float32 before casting
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(
        "loaded WeNet conformer from %s: %d layers, d=%d, %d units, %.1fM params, cmvn=%s",
        weights, cfg.num_blocks, cfg.output_size, len(units), n_params / 1e6, with_cmvn,
    )  # fmt: skip
    if decoder is not None:
        decoder.eval().to(device=device, dtype=dtype)
    reverse_weight = float((conf.get("model_conf") or {}).get("reverse_weight", 0.0))
    return WenetCheckpoint(model, cfg, units, fbank, weights, decoder, reverse_weight)


def _load_decoder(
    conf: dict[str, Any], enc: ConformerConfig, sd: dict[str, torch.Tensor], where: str
) -> torch.nn.Module | None:
    """The attention decoder named in train.yaml, loaded strictly; None (rescoring off) for
    kinds this runtime does not implement."""
    kind = conf.get("decoder", "bitransformer")
    if kind not in _DECODER_KINDS:
        logger.warning("decoder %r is not supported: attention rescoring is off", kind)
        return None
    dc = conf.get("decoder_conf") or {}
    cfg = DecoderConfig(
        kind=kind,
        vocab_size=enc.vocab_size,
        d_model=enc.output_size,
        attention_heads=int(dc.get("attention_heads", 4)),
        linear_units=int(dc.get("linear_units", 2048)),
        num_blocks=int(dc.get("num_blocks", 6)),
        r_num_blocks=int(dc.get("r_num_blocks", 0)),
        normalize_before=bool(dc.get("normalize_before", True)),
        norm_eps=float(dc.get("norm_eps", 1e-5)),
    )
    decoder = build_decoder(cfg)
    expected = {_DECODER_PREFIX + k: v for k, v in decoder.state_dict().items()}
    _check_keys(expected, {_DECODER_PREFIX + k: v for k, v in sd.items()}, where)
    decoder.load_state_dict(sd)
    return decoder


def _check_keys(expected: dict[str, torch.Tensor], given: dict[str, torch.Tensor], where: str) -> None:
    missing = [k for k in expected if k not in given]
    if missing:
        raise CheckpointError(f"{where}: missing key {missing[0]!r} ({len(missing)} missing)")
    unexpected = [k for k in given if k not in expected]
    if unexpected:
        raise CheckpointError(f"{where}: unexpected key {unexpected[0]!r} ({len(unexpected)} unexpected)")
    for k, v in expected.items():
        if given[k].shape != v.shape:
            raise CheckpointError(
                f"{where}: key {k!r} has shape {tuple(given[k].shape)}, train.yaml implies {tuple(v.shape)}"
            )
