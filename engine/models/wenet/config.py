"""A WeNet checkpoint directory's configuration, read without torch: train.yaml into typed records,
units.txt, which .pt holds the weights. What detection, `describe` and the loader share.

Both yaml flavours are read: WeNet 2.x (`cmvn_file`, `is_json_cmvn` at the top) and 3.x
(`cmvn_conf`, `tokenizer_conf`). Training-only settings (dither, spec_aug, dropout, optim)
are ignored. Anything the runtime cannot reproduce exactly fails here, naming the key or file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.checkpoint_files import read_yaml_mapping
from engine.errors import CheckpointError

if TYPE_CHECKING:
    from engine.fbank import FbankOptions

SUBSAMPLING = 4
"""conv2d input layer: two stride-2 3x3 convolutions."""
WINDOW_TYPES = ("povey", "hamming", "hanning", "rectangular")
"""Kaldi's frame windows (torchaudio's kaldi.fbank `window_type`; 'blackman' is not computed here)."""
RIGHT_CONTEXT = 6
"""Extra feature frames the subsampling needs beyond 4 per output frame."""


@dataclass(frozen=True)
class ConformerConfig:
    input_dim: int = 80
    vocab_size: int = 5000
    output_size: int = 256
    attention_heads: int = 4
    linear_units: int = 2048
    num_blocks: int = 12
    cnn_module_kernel: int = 15
    cnn_module_norm: str = "batch_norm"
    """'batch_norm' (WeNet default) or 'layer_norm'."""
    macaron_style: bool = True
    use_cnn_module: bool = True
    normalize_before: bool = True
    activation_type: str = "swish"
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.output_size // self.attention_heads

    @property
    def conv_lorder(self) -> int:
        """Left context of the causal depthwise convolution (its streaming cache length)."""
        return self.cnn_module_kernel - 1 if self.use_cnn_module else 0


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
DECODER_PREFIX = "decoder."
"""State-dict names of the attention decoder (rescoring)."""
DECODER_KINDS = ("transformer", "bitransformer")
"""train.yaml `decoder` kinds this runtime rescores with; another kind's weights are ignored."""


def encoder_frame_seconds(frame_shift_ms: float) -> float:
    """Seconds per encoder frame: the fbank shift times the conv2d subsampling."""
    return SUBSAMPLING * frame_shift_ms / 1000.0


def rescores_with(conf: dict[str, Any]) -> bool:
    """Whether train.yaml names a decoder kind this runtime runs (given its weights are there)."""
    return conf.get("decoder", "bitransformer") in DECODER_KINDS


@dataclass(frozen=True)
class Frontend:
    """train.yaml's fbank settings (engine.fbank.FbankOptions, which imports torch, at load)."""

    sample_rate: int
    """Hz."""
    num_mel_bins: int
    frame_length_ms: float
    frame_shift_ms: float
    window_type: str = "povey"
    """fbank_conf.window_type (WeNet 3.x's compute_fbank passes it to Kaldi's fbank; povey before)."""

    @property
    def frame_seconds(self) -> float:
        return encoder_frame_seconds(self.frame_shift_ms)

    def fbank_options(self) -> FbankOptions:
        from engine.fbank import FbankOptions

        return FbankOptions(sample_rate=self.sample_rate, num_mel_bins=self.num_mel_bins,
                            frame_length_ms=self.frame_length_ms, frame_shift_ms=self.frame_shift_ms,
                            window_type=self.window_type)


NATIVE_MANIFEST, NATIVE_WEIGHTS, NATIVE_FORMAT = "oasr.json", "model.safetensors", "oasr"
"""OASR's own WeNet layout (`oasr convert`, native.py): its manifest, weights and format name."""


def is_native(ckpt_dir: str) -> bool:
    """A directory `oasr convert` wrote (native.py): its manifest names the wenet family."""
    path = os.path.join(ckpt_dir, NATIVE_MANIFEST)
    if not (os.path.isfile(path) and os.path.isfile(os.path.join(ckpt_dir, NATIVE_WEIGHTS))):
        return False
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False
    return bool(isinstance(manifest, dict) and manifest.get("family") == "wenet"
                and manifest.get("format") == NATIVE_FORMAT)


def weights_file(ckpt_dir: str, checkpoint_name: str | None = None) -> str | None:
    """The state dict of a checkpoint dir: OASR's layout's model.safetensors (native.py), else the
    .pt `checkpoint_name` when given, else final.pt / avg.pt, else the only .pt there."""
    if checkpoint_name is None and is_native(ckpt_dir):
        return os.path.join(ckpt_dir, NATIVE_WEIGHTS)
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


def require_weights(ckpt_dir: str, checkpoint_name: str | None = None) -> str:
    """`weights_file`, or CheckpointError saying why there is none."""
    weights = weights_file(ckpt_dir, checkpoint_name)
    if weights is None:
        if checkpoint_name is not None:
            raise CheckpointError(f"{ckpt_dir}: checkpoint_name {checkpoint_name!r} is not a .pt state dict there")
        raise CheckpointError(f"{ckpt_dir}: no final.pt/avg.pt and not exactly one .pt state dict; set checkpoint_name")
    return weights


def detect(ckpt_dir: str, checkpoint_name: str | None = None) -> bool:
    """A WeNet dir: train.yaml + units.txt + a .pt state dict (`checkpoint_name`, when given) or
    OASR's layout's weights."""
    if not (os.path.isfile(os.path.join(ckpt_dir, CONFIG_FILE)) and os.path.isfile(os.path.join(ckpt_dir, UNITS_FILE))):
        return False
    if checkpoint_name is not None:
        return checkpoint_name.endswith(".pt")
    return weights_file(ckpt_dir) is not None or any(n.endswith(".pt") for n in os.listdir(ckpt_dir))


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


def resolve(ckpt_dir: str, path: str) -> str:
    """Training-time paths rarely exist where the checkpoint is served; fall back to the dir."""
    for candidate in (path, os.path.join(ckpt_dir, path), os.path.join(ckpt_dir, os.path.basename(path))):
        if os.path.isfile(candidate):
            return candidate
    return path




def parse_config(conf: dict[str, Any], vocab_size: int, where: str) -> tuple[ConformerConfig, Frontend]:
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
    feats_type = dataset.get("feats_type", "fbank")
    if feats_type != "fbank":  # WeNet also trains on 'mfcc' and 'log_mel_spectrogram' (dataset.py)
        raise CheckpointError(f"{where}: dataset_conf.feats_type {feats_type!r} is not supported (only 'fbank')")
    fb = dataset.get("fbank_conf") or {}
    window_type = str(fb.get("window_type", "povey"))
    if window_type not in WINDOW_TYPES:
        raise CheckpointError(f"{where}: fbank_conf.window_type {window_type!r} is not one of {', '.join(WINDOW_TYPES)}")
    sample_rate = int((dataset.get("resample_conf") or {}).get("resample_rate", 16000))
    input_dim = int(conf.get("input_dim", fb.get("num_mel_bins", 80)))
    fbank = Frontend(
        sample_rate=sample_rate,
        num_mel_bins=int(fb.get("num_mel_bins", input_dim)),
        frame_length_ms=float(fb.get("frame_length", 25)),
        frame_shift_ms=float(fb.get("frame_shift", 10)),
        window_type=window_type,
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


@dataclass(frozen=True)
class Configuration:
    """What a WeNet directory says of itself, weights aside."""

    raw: dict[str, Any]
    """train.yaml as parsed."""
    path: str
    """train.yaml's path (for messages)."""
    units: list[str]
    encoder: ConformerConfig
    frontend: Frontend


def read_configuration(ckpt_dir: str) -> Configuration:
    path = os.path.join(ckpt_dir, CONFIG_FILE)
    conf = read_yaml_mapping(path)
    units_path = resolve(ckpt_dir, ((conf.get("tokenizer_conf") or {}).get("symbol_table_path") or UNITS_FILE))
    if not os.path.isfile(units_path):
        units_path = os.path.join(ckpt_dir, UNITS_FILE)
    units = load_units(units_path)
    encoder, frontend = parse_config(conf, len(units), path)
    return Configuration(conf, path, units, encoder, frontend)
