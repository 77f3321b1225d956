"""Writes a `.nemo` of any FastConformer size from a NeMo-written template, without NeMo: the
template's config (resized), tokenizer and mel tensors, freshly initialised weights in NeMo's
names. For benchmarks that need a realistic-size model (d_model 256-512, 16-17 layers); the
weights are random, so the transcripts are meaningless, but every tensor has its real shape and
every step its real cost.
"""

from __future__ import annotations

import copy
import io
import os
import tarfile
from pathlib import Path

import torch
import yaml

from engine.models.nemo.archive import CONFIG_NAME, WEIGHTS_NAME, read_archive
from engine.models.nemo.checkpoint import NemoModel
from engine.models.nemo.config import parse_config

TEMPLATE = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "nemo" / "hybrid_cache_aware" / "model.nemo"
"""A hybrid RNNT+CTC cache-aware checkpoint written by NeMo 3.0.0 (tests/fixtures/nemo/README.md)."""
UNIFIED_TEMPLATE = TEMPLATE.parents[1] / "unified_rc" / "model.nemo"
"""An RNN-T `chunked_limited_with_rc` (buffered streaming) checkpoint written by NeMo 3.0.0."""
NEMO_LOOK_AHEADS = [[70, 13], [70, 6], [70, 1], [70, 0]]
"""The look-aheads of NeMo's published cache-aware FastConformers: 1120, 560, 160 and 80 ms chunks."""
BLANK_BIAS = 0.43
"""Added to blank's logit (after centring the joint's rows) so the random joint emits tokens on a fraction of
frames (about 0.2-0.5 per frame at d_model 256), not max_symbols on each."""


def write_checkpoint(
    path: str | os.PathLike[str], d_model: int = 512, n_layers: int = 17, n_heads: int = 8,
    look_aheads: list[list[int]] | None = None, pred_hidden: int = 640, seed: int = 0,
    template: str | os.PathLike[str] = TEMPLATE, blank_bias: float = BLANK_BIAS, max_symbols: int | None = None,
) -> str:  # fmt: skip
    """Write a resized copy of `template` to `path` (a .nemo file); returns the path. `max_symbols`
    (default: the template's) caps the tokens a frame emits: 1 with a `blank_bias` near 0.4 makes
    the random joint emit a token on part of the frames, as a trained model does."""
    archive = read_archive(str(template))
    cfg = copy.deepcopy(archive.config)
    cfg["encoder"].update(
        d_model=d_model, n_layers=n_layers, n_heads=n_heads, ff_expansion_factor=4, subsampling_conv_channels=256,
    )  # fmt: skip
    if cfg["encoder"].get("att_context_style") == "chunked_limited":  # a buffered template keeps its windows
        cfg["encoder"]["att_context_size"] = look_aheads or NEMO_LOOK_AHEADS
    cfg["model_defaults"] = {"enc_hidden": d_model, "pred_hidden": pred_hidden, "joint_hidden": pred_hidden}
    cfg["decoder"]["prednet"]["pred_hidden"] = pred_hidden
    cfg["joint"]["jointnet"].update(joint_hidden=pred_hidden, encoder_hidden=d_model, pred_hidden=pred_hidden)
    if "aux_ctc" in cfg:
        cfg["aux_ctc"]["decoder"]["feat_in"] = d_model
    if max_symbols is not None:
        cfg["decoding"]["greedy"]["max_symbols"] = max_symbols
    torch.manual_seed(seed)
    model = NemoModel(parse_config(cfg))
    with torch.no_grad():
        assert model.transducer is not None
        out = model.transducer.joint.joint_net[1]
        # The joint's hidden units are ReLU outputs (>= 0): centre each output row, or the rows with
        # the largest sums win every step and the search emits max_symbols tokens on every frame.
        out.weight.sub_(out.weight.mean(dim=1, keepdim=True))
        out.bias.zero_()
        out.bias[model.transducer.blank] += blank_bias
        if model.ctc is not None:
            model.ctc.decoder_layers[0].bias[-1] += blank_bias
    weights = {name: t for name, t in archive.state_dict.items() if name.startswith("preprocessor.")}
    dropout_shift = 1 if cfg["joint"]["jointnet"].get("dropout") else 0  # NeMo's joint_net index moves with it
    for name, tensor in model.state_dict().items():
        name = name.removeprefix("transducer.")
        name = name.replace("joint.joint_net.1.", f"joint.joint_net.{1 + dropout_shift}.")
        name = name.replace("ctc.", "ctc_decoder.", 1) if name.startswith("ctc.") else name
        weights[name] = tensor
    buf = io.BytesIO()
    torch.save(weights, buf)
    files = {CONFIG_NAME: yaml.safe_dump(cfg, allow_unicode=True).encode(), WEIGHTS_NAME: buf.getvalue(),
             **archive.artifacts}  # fmt: skip
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def write_realistic(ckpt_dir: str, buffered: bool = False) -> str:
    """The benchmarks' FastConformer (`engine/synthetic.py`): d_model 256 x 16 layers, blank biased so
    a third of the frames emit one token, cache-aware (or, `buffered`, chunked_limited_with_rc), as
    `model.nemo` in `ckpt_dir`; returns the directory."""
    os.makedirs(ckpt_dir, exist_ok=True)
    write_checkpoint(os.path.join(ckpt_dir, "model.nemo"), d_model=256, n_layers=16, blank_bias=0.4, max_symbols=1,
                     template=UNIFIED_TEMPLATE if buffered else TEMPLATE)  # fmt: skip
    return ckpt_dir
