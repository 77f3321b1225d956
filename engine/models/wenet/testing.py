"""Writes small random-init WeNet checkpoints in the real on-disk format (train.yaml, final.pt,
units.txt, global_cmvn) so tests and benchmarks load them through the user-facing loader.

No real WeNet weights can be fetched here; these checkpoints exercise every code path (shapes,
names, CMVN flavours, optional tables) while their transcripts are meaningless.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import yaml

from engine.models.wenet.config import ConformerConfig
from engine.models.wenet.decoder import DecoderConfig, build_decoder
from engine.models.wenet.model import ConformerCTC
from engine.models.wenet.runner import WenetRunner
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ'"


@dataclass(frozen=True)
class CheckpointSpec:
    output_size: int = 64
    attention_heads: int = 4
    linear_units: int = 128
    num_blocks: int = 2
    cnn_module_kernel: int = 7
    cnn_module_norm: str = "layer_norm"
    seed: int = 0
    cmvn: Literal["json", "kaldi", "state_dict", "both", "none"] = "json"
    """Where the CMVN stats live: a JSON/Kaldi file named in train.yaml, the state dict, both, or nowhere."""
    yaml_flavour: Literal["v2", "v3"] = "v2"
    """WeNet 2.x keys (`cmvn_file`, `is_json_cmvn`) or 3.x (`cmvn_conf`, `tokenizer_conf`)."""
    include_pe: bool = True
    """Write the `encoder.embed.pos_enc.pe` buffer that some exports carry."""
    with_decoder: bool = False
    """Add `decoder.*` tensors (an attention decoder the CTC runtime ignores)."""
    logit_scale: float = 4.0
    """Scales ctc_lo so a random model emits tokens instead of almost only blanks."""


def units_list() -> list[str]:
    """SentencePiece-style units: blank, unk, word-initial and inner letter pieces, sos/eos."""
    pieces = [f"▁{c}" for c in LETTERS] + list(LETTERS)
    return ["<blank>", "<unk>", *pieces, "<sos/eos>"]


def write_checkpoint(ckpt_dir: str, spec: CheckpointSpec | None = None) -> str:
    """Create `ckpt_dir` with a random-init Conformer-CTC checkpoint; returns the dir."""
    spec = spec or CheckpointSpec()
    os.makedirs(ckpt_dir, exist_ok=True)
    units = units_list()
    cfg = ConformerConfig(
        input_dim=80, vocab_size=len(units), output_size=spec.output_size, attention_heads=spec.attention_heads,
        linear_units=spec.linear_units, num_blocks=spec.num_blocks, cnn_module_kernel=spec.cnn_module_kernel,
        cnn_module_norm=spec.cnn_module_norm,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(spec.seed)
    torch.manual_seed(spec.seed)
    model = ConformerCTC(cfg, with_cmvn=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "pos_bias" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
        model.ctc.ctc_lo.weight.mul_(spec.logit_scale)
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm1d):  # non-trivial running stats
                assert module.running_mean is not None and module.running_var is not None
                module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
                module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
    # Plausible log-mel statistics (speech at 32768 scale sits around 8..14 with std ~2..4).
    mean = 8.0 + 4.0 * torch.rand(80, generator=gen, dtype=torch.float64)
    std = 2.0 + 2.0 * torch.rand(80, generator=gen, dtype=torch.float64)
    frames = 100000
    sums, sqsums = mean * frames, (std.square() + mean.square()) * frames

    sd = model.state_dict()
    sd["encoder.global_cmvn.mean"] = mean.float()
    sd["encoder.global_cmvn.istd"] = (1.0 / std).float()
    if spec.cmvn in ("json", "kaldi", "none"):
        del sd["encoder.global_cmvn.mean"], sd["encoder.global_cmvn.istd"]
    if spec.include_pe:
        pos = torch.arange(5000, dtype=torch.float32).unsqueeze(1)
        div = torch.exp(
            torch.arange(0, cfg.output_size, 2, dtype=torch.float32)
            * -(torch.log(torch.tensor(1e4)) / cfg.output_size)
        )
        pe = torch.zeros(5000, cfg.output_size)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        sd["encoder.embed.pos_enc.pe"] = pe.unsqueeze(0)
    if spec.with_decoder:  # U2++ bidirectional attention decoder, one block each way
        decoder = build_decoder(DecoderConfig(
            kind="bitransformer", vocab_size=len(units), d_model=cfg.output_size,
            attention_heads=cfg.attention_heads, linear_units=cfg.linear_units, num_blocks=1, r_num_blocks=1,
        ))  # fmt: skip
        for name, tensor in decoder.state_dict().items():
            sd[f"decoder.{name}"] = tensor
        if spec.include_pe:
            for side in ("left", "right"):
                sd[f"decoder.{side}_decoder.embed.1.pe"] = sd["encoder.embed.pos_enc.pe"]
    torch.save(sd, os.path.join(ckpt_dir, "final.pt"))

    with open(os.path.join(ckpt_dir, "units.txt"), "w", encoding="utf-8") as f:
        f.writelines(f"{u} {i}\n" for i, u in enumerate(units))
    cmvn_name = None
    if spec.cmvn in ("json", "both"):
        cmvn_name = "global_cmvn"
        with open(os.path.join(ckpt_dir, cmvn_name), "w", encoding="utf-8") as f:
            json.dump({"mean_stat": sums.tolist(), "var_stat": sqsums.tolist(), "frame_num": frames}, f)
    elif spec.cmvn == "kaldi":
        cmvn_name = "global_cmvn.kaldi"
        with open(os.path.join(ckpt_dir, cmvn_name), "w", encoding="utf-8") as f:
            f.write(" [\n  " + " ".join(f"{x:.6f}" for x in sums.tolist()) + f" {frames}\n  ")
            f.write(" ".join(f"{x:.6f}" for x in sqsums.tolist()) + " 0 ]\n")
    with open(os.path.join(ckpt_dir, "train.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(_train_yaml(spec, cfg, cmvn_name), f, sort_keys=False)
    return ckpt_dir


def _train_yaml(spec: CheckpointSpec, cfg: ConformerConfig, cmvn_name: str | None) -> dict[str, object]:
    conf: dict[str, object] = {
        "encoder": "conformer",
        "encoder_conf": {
            "output_size": cfg.output_size, "attention_heads": cfg.attention_heads,
            "linear_units": cfg.linear_units, "num_blocks": cfg.num_blocks, "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.0, "input_layer": "conv2d",
            "normalize_before": True, "cnn_module_kernel": cfg.cnn_module_kernel, "use_cnn_module": True,
            "activation_type": "swish", "pos_enc_layer_type": "rel_pos",
            "selfattention_layer_type": "rel_selfattn", "causal": True, "use_dynamic_chunk": True,
            "cnn_module_norm": cfg.cnn_module_norm, "use_dynamic_left_chunk": False,
        },
        "decoder": "bitransformer",
        "decoder_conf": {"attention_heads": cfg.attention_heads, "linear_units": cfg.linear_units, "num_blocks": 1,
                         "r_num_blocks": 1, "dropout_rate": 0.1},
        "model_conf": {"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False, "reverse_weight": 0.3},
        "dataset_conf": {
            "filter_conf": {"max_length": 40960, "min_length": 0},
            "resample_conf": {"resample_rate": 16000},
            "speed_perturb": True,
            "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25, "dither": 0.1},
            "spec_aug": True,
            "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2, "max_t": 50, "max_f": 10},
            "shuffle": True, "sort": True, "batch_conf": {"batch_type": "static", "batch_size": 16},
        },
        "grad_clip": 5, "accum_grad": 1, "max_epoch": 240, "optim": "adam", "optim_conf": {"lr": 0.001},
        "scheduler": "warmuplr", "scheduler_conf": {"warmup_steps": 25000},
        "input_dim": 80,
        "output_dim": cfg.vocab_size,
    }  # fmt: skip
    # Training-time paths: the loader must find the files next to train.yaml instead.
    train_path = f"exp/data/train/{cmvn_name}" if cmvn_name else None
    if spec.yaml_flavour == "v2":
        if train_path:
            conf["cmvn_file"], conf["is_json_cmvn"] = train_path, spec.cmvn != "kaldi"
    else:
        conf["model"] = "asr_model"
        conf["tokenizer"] = "bpe"
        conf["tokenizer_conf"] = {
            "symbol_table_path": "exp/data/lang/units.txt",
            "split_with_space": False,
            "bpe_path": "exp/data/lang/bpe.model",
            "non_lang_syms_path": None,
        }
        conf["ctc_conf"] = {"ctc_blank_id": 0}
        if train_path:
            conf["cmvn"] = "global_cmvn"
            conf["cmvn_conf"] = {"cmvn_file": train_path, "is_json_cmvn": spec.cmvn != "kaldi"}
    return conf


def drive_alone(
    runner: WenetRunner, audio: np.ndarray, piece_samples: int | None = None, request_id: str = "alone",
    decoding: DecodingOptions | None = None,
) -> list[RequestOutput]:  # fmt: skip
    """Stream `audio` through `runner` as the only request, `piece_samples` per engine step
    (None: one shot), and return every output it produced (the last one finished)."""
    req = Request(
        request_id, streaming=True, decoding=decoding or DecodingOptions(), sample_rate=runner.sample_rate
    )
    failed = runner.admit([req])
    if failed:
        return failed
    step = piece_samples or max(1, len(audio))
    outputs: list[RequestOutput] = []
    for start in range(0, len(audio), step):
        req.append_audio(audio[start : start + step])
        outputs += runner.execute()
    req.input_finished = True
    while not (outputs and outputs[-1].finished):
        outputs += runner.execute()
    return outputs


def record_log_probs(runner: WenetRunner) -> dict[str, list[torch.Tensor]]:
    """Instrument `runner` so that the CTC log-probs each request's decoder consumes are
    recorded, by request id (one tensor per chunk)."""
    seen: dict[str, list[torch.Tensor]] = {}
    advance = runner._advance_ctc

    def advance_and_record(streams: list, log_probs: torch.Tensor, lengths: list[int]) -> dict:  # type: ignore[type-arg]
        for i, (stream, n) in enumerate(zip(streams, lengths, strict=True)):
            seen.setdefault(stream.request.request_id, []).append(log_probs[i, :n].clone())
        return advance(streams, log_probs, lengths)

    runner._advance_ctc = advance_and_record  # type: ignore[method-assign]
    return seen


REALISTIC = CheckpointSpec(output_size=256, attention_heads=4, linear_units=1024, num_blocks=6, cnn_module_kernel=15)
"""~11 M parameters: a small U2++ conformer (d 256, 6 blocks, FFN 1024)."""


def write_realistic(ckpt_dir: str) -> str:
    """The benchmarks' WeNet conformer (`engine/synthetic.py`) in `ckpt_dir`; returns the directory."""
    return write_checkpoint(ckpt_dir, REALISTIC)
