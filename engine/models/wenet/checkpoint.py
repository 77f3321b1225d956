"""Loading a WeNet checkpoint directory: train.yaml, a .pt state dict, units.txt, global_cmvn
(the configuration is read by config.py)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import torch

from engine.errors import CheckpointError
from engine.fbank import FbankOptions
from engine.models.wenet.config import (
    DECODER_PREFIX,
    ConformerConfig,
    read_configuration,
    require_weights,
    rescores_with,
    resolve,
)
from engine.models.wenet.decoder import DecoderConfig, build_decoder
from engine.models.wenet.model import ConformerCTC

logger = logging.getLogger(__name__)


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
    sos: int
    eos: int
    """The decoder's start and end ids: tokenizer_conf.special_tokens' `<sos>` / `<eos>` (WeNet 3.x,
    e.g. 2 in its aishell recipes), else the last unit (WeNet's ASRModel falls back the same way)."""

    @property
    def has_decoder(self) -> bool:
        return self.decoder is not None


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


def _cmvn_file(conf: dict[str, Any]) -> tuple[str | None, bool | None]:
    cmvn_conf = conf.get("cmvn_conf") or {}
    path = cmvn_conf.get("cmvn_file") or conf.get("cmvn_file")
    is_json = cmvn_conf.get("is_json_cmvn", conf.get("is_json_cmvn"))
    return path, (None if is_json is None else bool(is_json))


WRAPPERS = ("model", "state_dict")
"""Keys some exports nest the state dict under."""


def state_dict_keys(path: str) -> list[str]:
    """The keys of the state dict saved at `path`, without reading its tensors where the file
    allows it: a zip-format file (torch >= 1.6) is memory-mapped and no tensor page is touched;
    a legacy-format one cannot be mapped, so it is read."""
    try:
        return list(_read_state_dict(path, mmap=True))
    except CheckpointError:
        return list(_read_state_dict(path))


def _read_state_dict(path: str, *, mmap: bool = False) -> dict[str, torch.Tensor]:
    if path.endswith(".safetensors"):  # OASR's layout (native.py): memory-mapped, nothing to unpickle
        from safetensors.torch import load_file

        try:
            return load_file(path)
        except Exception as exc:  # safetensors' own error types for a damaged header
            raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from exc
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:  # torch raises many types for a corrupt file
        raise CheckpointError(f"cannot load state dict {path!r}: {exc}") from exc
    for wrapper in WRAPPERS:  # some exports nest the weights
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            obj = obj[wrapper]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path}: expected a state dict of tensors")
    return {k.removeprefix("module."): v for k, v in obj.items()}


def load_checkpoint(
    ckpt_dir: str, device: torch.device, dtype: torch.dtype, checkpoint_name: str | None = None
) -> WenetCheckpoint:
    read = read_configuration(ckpt_dir)
    conf, units, cfg, fbank = read.raw, read.units, read.encoder, read.frontend.fbank_options()
    weights = require_weights(ckpt_dir, checkpoint_name)
    sd = _read_state_dict(weights)
    # Fixed sinusoid tables (`*.pe`) are rebuilt on the fly, whatever their length.
    sd = {k: v for k, v in sd.items() if not (k.endswith(".pe") and ".embed." in f".{k}")}
    decoder_sd = {k[len(DECODER_PREFIX) :]: v for k, v in sd.items() if k.startswith(DECODER_PREFIX)}
    sd = {k: v for k, v in sd.items() if not k.startswith(DECODER_PREFIX)}
    decoder = _load_decoder(conf, cfg, decoder_sd, weights) if decoder_sd else None
    cmvn_path, is_json = _cmvn_file(conf)
    with_cmvn = "encoder.global_cmvn.mean" in sd or cmvn_path is not None
    model = ConformerCTC(cfg, with_cmvn=with_cmvn)
    if "encoder.global_cmvn.mean" not in sd and cmvn_path is not None:
        mean, istd = load_cmvn(resolve(ckpt_dir, cmvn_path), is_json)
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
    sos, eos = _sos_eos(conf, len(units), weights)
    return WenetCheckpoint(model, cfg, units, fbank, weights, decoder, reverse_weight, sos, eos)


def _sos_eos(conf: dict[str, Any], vocab_size: int, where: str) -> tuple[int, int]:
    special = (conf.get("tokenizer_conf") or {}).get("special_tokens") or {}
    ids = []
    for name in ("<sos>", "<eos>"):
        value = special.get(name, vocab_size - 1)
        if not isinstance(value, int) or not 0 <= value < vocab_size:
            raise CheckpointError(f"{where}: tokenizer_conf.special_tokens {name}={value!r} is not a unit id")
        ids.append(value)
    return ids[0], ids[1]


def _load_decoder(
    conf: dict[str, Any], enc: ConformerConfig, sd: dict[str, torch.Tensor], where: str
) -> torch.nn.Module | None:
    """The attention decoder named in train.yaml, loaded strictly; None (rescoring off) for
    kinds this runtime does not implement."""
    kind = conf.get("decoder", "bitransformer")
    if not rescores_with(conf):
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
    expected = {DECODER_PREFIX + k: v for k, v in decoder.state_dict().items()}
    _check_keys(expected, {DECODER_PREFIX + k: v for k, v in sd.items()}, where)
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
