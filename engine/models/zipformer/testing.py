"""Writes a random-weight streaming Zipformer2 transducer sized like icefall's 'small' recipe, in
the loader's on-disk format (`pretrained.pt`, `model_args.json`, `tokens.txt`): for benchmarks that
need a realistic-size model. The transcripts are meaningless; every tensor has its real shape and
every step its real cost."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch

from engine.models.zipformer.checkpoint import ZipformerModel, icefall_state_dict
from engine.models.zipformer.config import ZipformerConfig
from engine.models.zipformer.frontend import Featurizer

SMALL_ARGS: dict[str, Any] = {
    "num_encoder_layers": "2,2,2,2,2,2", "downsampling_factor": "1,2,4,8,4,2",
    "feedforward_dim": "512,768,768,768,768,768", "num_heads": "4,4,4,8,4,4",
    "encoder_dim": "192,256,256,256,256,256", "encoder_unmasked_dim": "192,192,192,192,192,192",
    "query_head_dim": "32", "value_head_dim": "12", "pos_head_dim": "4", "pos_dim": 48,
    "cnn_module_kernel": "31,31,15,15,15,31", "decoder_dim": 512, "joiner_dim": 512, "context_size": 2,
    "causal": True, "chunk_size": "8,16,32,64,-1", "left_context_frames": "64,128,256,-1", "vocab_size": 500,
}  # fmt: skip
"""icefall's zipformer 'small' recipe (egs/librispeech/ASR/zipformer README), causal, with chunk 8
(160 ms) among the trained sizes: about 23 M parameters."""
TOKEN_RATE = 0.3
"""Share of encoder frames that emit a token (random weights emit on nearly all)."""
SAMPLE_RATE = 16000


def write_realistic(ckpt_dir: str, audio: np.ndarray | None = None, seed: int = 0) -> str:
    """A random-weight small streaming Zipformer in `ckpt_dir`; blank's bias is raised so that about
    TOKEN_RATE of the frames of `audio` (noise when None) emit, as a trained model's do."""
    os.makedirs(ckpt_dir, exist_ok=True)
    torch.manual_seed(seed)
    if audio is None:
        audio = (0.1 * np.random.default_rng(seed).standard_normal(8 * SAMPLE_RATE)).astype(np.float32)
    model = ZipformerModel(ZipformerConfig.from_args(SMALL_ARGS, "benchmark")).eval()
    with torch.inference_mode():  # blank's bias at the quantile that leaves TOKEN_RATE of frames emitting
        feats = Featurizer(torch.device("cpu")).utterance(audio[: 8 * SAMPLE_RATE])
        enc, _ = model.encoder(feats.unsqueeze(0), torch.tensor([feats.shape[0]]))
        dec = model.joiner.project_decoder(model.decoder.predict(torch.tensor([model.decoder.start_context()])))
        logits = model.joiner.join(model.joiner.project_encoder(enc[0]), dec)
        margin = logits[:, 1:].max(dim=-1).values - logits[:, 0]
        model.joiner.output_linear.bias[0] += float(torch.quantile(margin, 1 - TOKEN_RATE))
    torch.save({"model": icefall_state_dict(model)}, os.path.join(ckpt_dir, "pretrained.pt"))
    with open(os.path.join(ckpt_dir, "model_args.json"), "w") as f:
        json.dump(SMALL_ARGS, f)
    pieces = ["<blk>", "<sos/eos>", "<unk>"] + [f"▁w{i}" if i % 3 == 0 else f"p{i}" for i in range(497)]
    with open(os.path.join(ckpt_dir, "tokens.txt"), "w") as f:
        f.writelines(f"{p} {i}\n" for i, p in enumerate(pieces))
    return ckpt_dir
