"""Writes a random-weight Paraformer shaped like FunASR's paraformer-large (offline) or
paraformer-zh-streaming (online) as a FunASR model directory (`config.yaml`, `model.pt`,
`tokens.json`, `am.mvn`): for benchmarks that need a realistic-size model. The transcripts are
meaningless; every tensor has its real shape and every step its real cost."""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import yaml

from engine.models.paraformer.config import parse_config
from engine.models.paraformer.model import Paraformer

VOCAB = 8404
"""paraformer-zh's vocabulary (`vocab8404`)."""
LARGE: dict[str, Any] = {
    "model": "Paraformer",
    "encoder": "SANMEncoder",
    "encoder_conf": {"output_size": 512, "attention_heads": 4, "linear_units": 2048, "num_blocks": 50,
                     "input_layer": "pe", "kernel_size": 11, "sanm_shfit": 0},
    "decoder": "ParaformerSANMDecoder",
    "decoder_conf": {"attention_heads": 4, "linear_units": 2048, "num_blocks": 16, "att_layer_num": 16,
                     "kernel_size": 11, "sanm_shfit": 0},
    "predictor": "CifPredictorV2",
    "predictor_conf": {"idim": 512, "threshold": 1.0, "l_order": 1, "r_order": 1, "tail_threshold": 0.45},
    "frontend": "WavFrontend",
    "frontend_conf": {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25, "frame_shift": 10,
                      "lfr_m": 7, "lfr_n": 6},
}
"""FunASR's paraformer-large config.yaml, the parts the runtime reads."""
ONLINE: dict[str, Any] = {
    **LARGE,
    "model": "ParaformerStreaming",
    "encoder": "SANMEncoderChunkOpt",
    "encoder_conf": {**LARGE["encoder_conf"], "input_layer": "pe_online"},
    "decoder_conf": {**LARGE["decoder_conf"], "sanm_shfit": 5},
    "frontend": "WavFrontendOnline",
}
"""paraformer-zh-streaming's config.yaml, the parts the runtime reads."""
CIF_BIAS = -0.85
"""A CIF weight near 0.3 per 60 ms frame: about 5 tokens a second, as speech has."""


def write_realistic(ckpt_dir: str, online: bool = False, seed: int = 0) -> str:
    """A random-weight paraformer-large (or, `online`, paraformer-zh-streaming) in `ckpt_dir`."""
    os.makedirs(ckpt_dir, exist_ok=True)
    raw = ONLINE if online else LARGE
    torch.manual_seed(seed)
    model = Paraformer(parse_config(raw, VOCAB)).eval()
    with torch.no_grad():
        model.predictor.cif_output.bias.fill_(CIF_BIAS)
    torch.save(model.state_dict(), os.path.join(ckpt_dir, "model.pt"))
    with open(os.path.join(ckpt_dir, "config.yaml"), "w") as f:
        yaml.safe_dump(raw, f)
    with open(os.path.join(ckpt_dir, "tokens.json"), "w") as f:
        json.dump(["<blank>", "<s>", "</s>", *(f"t{i}" for i in range(3, VOCAB - 1)), "<unk>"], f)
    dim = raw["frontend_conf"]["n_mels"] * raw["frontend_conf"]["lfr_m"]
    with open(os.path.join(ckpt_dir, "am.mvn"), "w") as f:  # CMVN near a log-mel's scale, as released models have
        f.write(f"<Nnet>\n<Splice> {dim} {dim}\n[ 0 ]\n<AddShift> {dim} {dim}\n<LearnRateCoef> 0 [ {' -8.0' * dim} ]\n"
                f"<Rescale> {dim} {dim}\n<LearnRateCoef> 0 [ {' 0.25' * dim} ]\n</Nnet>\n")
    return ckpt_dir
