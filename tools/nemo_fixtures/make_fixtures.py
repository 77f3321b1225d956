"""Build tiny random-weight NeMo checkpoints with NeMo itself and record NeMo's outputs on them.

Run by hand in a throwaway venv (never in the project's venv; tests never import NeMo):

    python3 -m venv /work/nemo-venv
    /work/nemo-venv/bin/pip install torch==2.13.0
    /work/nemo-venv/bin/pip install 'nemo_toolkit[asr]==3.0.0'
    /work/nemo-venv/bin/python tools/nemo_fixtures/make_fixtures.py --out tests/fixtures/nemo

Writes, per fixture in configs.BUILDERS: `<name>/model.nemo` (NeMo's `save_to`) and
`<name>/reference.json` + `<name>/reference.npz` (tokens per setting, step schedules, encoder
outputs of the first steps). A realistic-size checkpoint for the capacity benchmark is written
with `--realistic PATH` instead (not committed).

Random output layers emit a token on nearly every frame; `shape_outputs` scales the output
layers (wider gaps between the best two outputs, so parity is not fragile) and raises blank's
bias until blanks and tokens both occur.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import configs
import record

logger = logging.getLogger("nemo_fixtures")

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEECH = REPO.parent / "shared" / "data" / "speech"
CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "ps_goforward")
"""16 kHz mono clips: the tests read them with soundfile unchanged (no resampling to disagree on)."""
VOCAB_SIZE = 128
OUTPUT_SCALE = 20.0
JOINT_ENCODER_GAIN = 4.0
TARGET_TOKEN_RATE = 0.45
"""Tokens per encoder frame the blank bias is raised until (offline, over the clips)."""
BUFFERED_PRESETS = ([10, 4, 4], [10, 2, 2], [10, 1, 1], [10, 1, 4])
SEED = 20260101


def train_tokenizer(speech: Path, out_dir: str) -> str:
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

    lines = []
    for row in (
        json.loads(line) for line in (speech / "manifest.jsonl").read_text().splitlines() if line.strip()
    ):
        lines += [t.lower() for t in [row.get("text"), *(row.get("channel_texts") or [])] if t]
    text_file = os.path.join(out_dir, "text.txt")
    Path(text_file).write_text("\n".join(lines) + "\n")
    create_spt_model(text_file, VOCAB_SIZE, -1, True, tokenizer_type="bpe", output_dir=out_dir)
    return out_dir


def load_clip(speech: Path, clip_id: str) -> np.ndarray:
    rows = [json.loads(line) for line in (speech / "manifest.jsonl").read_text().splitlines() if line.strip()]
    row = next(r for r in rows if r["id"] == clip_id)
    data, rate = sf.read(str(speech / row["audio"]), dtype="float32", always_2d=True)
    if rate != configs.SAMPLE_RATE or data.shape[1] != 1:
        raise SystemExit(f"{clip_id}: fixtures use 16 kHz mono clips only (got {rate} Hz x {data.shape[1]})")
    return np.ascontiguousarray(data[:, 0])


def randomize_norms(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Non-trivial values where NeMo initialises constants, so parity covers them."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "pos_bias" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
                module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
                module.weight.copy_(1 + 0.1 * torch.randn(module.num_features, generator=gen))
                module.bias.copy_(0.1 * torch.randn(module.num_features, generator=gen))
            elif isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.1 * torch.randn(module.weight.shape, generator=gen))
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=gen))


def output_heads(model: Any) -> dict[str, tuple[torch.nn.Module, int]]:
    """Head name -> (its output layer, blank index)."""
    heads = {}
    if hasattr(model, "joint"):
        heads["rnnt"] = (model.joint.joint_net[-1], model.decoder.blank_idx)  # TDT durations follow blank
    ctc = getattr(model, "ctc_decoder", None) or (None if hasattr(model, "joint") else model.decoder)
    if ctc is not None:
        heads["ctc"] = (ctc.decoder_layers[0], ctc.num_classes_with_blank - 1)
    return heads


def token_rate(model: Any, clips: list[np.ndarray], head: str) -> float:
    tokens = frames = 0
    for audio in clips:
        out, _ = record.offline(model, audio, "probe")
        frames += out["encoder_frames"]
        tokens += len(out[head]["tokens"])
    return tokens / frames


@torch.inference_mode()
def head_inputs(model: Any, clips: list[np.ndarray], head: str) -> torch.Tensor:
    """(frames, hidden) what the head's output layer sees over the clips (the joint: at the
    decoder's start state)."""
    rows = []
    for audio in clips:
        mel, mel_len = model.preprocessor(
            input_signal=torch.from_numpy(audio)[None], length=torch.tensor([len(audio)])
        )
        enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
        h = enc[0, :, : int(enc_len[0])].T  # (T, D)
        if head == "rnnt":
            sos = torch.full((1, 1), model.decoder.blank_idx, dtype=torch.long)
            g, _ = model.decoder.predict(sos, None, add_sos=False, batch_size=1)
            h = torch.relu(model.joint.enc(h) + model.joint.pred(g[0]))
        rows.append(h)
    return torch.cat(rows)


def shape_outputs(model: Any, clips: list[np.ndarray]) -> dict[str, float]:
    """Per head: centre and scale the output weights, cancel the mean input's logits (so each
    frame's own features decide the token, not a constant offset), then raise blank's bias
    until tokens stop filling every frame."""
    biases = {}
    if hasattr(model, "joint"):  # let the acoustics, not the prediction net, drive the joint
        with torch.no_grad():
            model.joint.enc.weight.mul_(JOINT_ENCODER_GAIN)
    for head, (layer, blank) in output_heads(model).items():
        mean_input = head_inputs(model, clips, head).mean(dim=0)
        with torch.no_grad():
            w = layer.weight.view(layer.weight.shape[0], -1)  # tokens, blank (and TDT durations)
            w.sub_(w.mean(dim=1, keepdim=True)).mul_(OUTPUT_SCALE)
            layer.bias.copy_(-(w @ mean_input))
        bias = 0.0
        while token_rate(model, clips, head) > TARGET_TOKEN_RATE:
            bias += 1.0
            with torch.no_grad():
                layer.bias[blank] += 1.0
            if bias > 400:
                raise RuntimeError(f"{head}: blank bias did not bring the token rate down")
        biases[head] = bias
    return biases


def build(name: str, tokenizer_dir: str, clips: list[np.ndarray], out_dir: Path) -> Path:
    import nemo.collections.asr.models as asr_models
    from omegaconf import OmegaConf

    cls_name, builder = configs.BUILDERS[name]
    torch.manual_seed(SEED)
    model = getattr(asr_models, cls_name)(cfg=OmegaConf.create(builder(tokenizer_dir)), trainer=None).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    randomize_norms(model, gen)
    biases = shape_outputs(model, clips)
    logger.info(
        "%s: blank bias %s, token rates %s",
        name,
        biases,
        {h: round(token_rate(model, clips, h), 2) for h in biases},
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "model.nemo"
    model.save_to(str(path))
    return path


def record_all(
    path: Path, clip_ids: tuple[str, ...], clips: list[np.ndarray]
) -> tuple[dict[str, Any], dict[str, Any]]:
    from nemo.collections.asr.models import ASRModel

    model = ASRModel.restore_from(str(path), map_location="cpu").eval()
    enc = model.encoder
    ref: dict[str, Any] = {
        "nemo_class": type(model).__name__,
        "clips": {cid: {"samples": len(a), "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
                  for cid, a in zip(clip_ids, clips)},
        "offline": {},
    }  # fmt: skip
    arrays: dict[str, Any] = {}
    style = enc.att_context_style
    default_context = list(enc.att_context_size)
    for cid, audio in zip(clip_ids, clips):
        ref["offline"][cid], a = record.offline(model, audio, f"offline/{cid}")
        arrays.update(a)
    if style == "chunked_limited":
        heads = [h for h in ("rnnt", "ctc") if (h == "rnnt" and record.has_rnnt(model)) or
                 (h == "ctc" and record.has_ctc(model))]  # fmt: skip
        ref["cache_aware"] = []
        for look_ahead in enc.att_context_size_all:
            for head in heads:
                for cid, audio in zip(clip_ids, clips):
                    key = f"cache_aware/{look_ahead[0]}_{look_ahead[1]}/{head}/{cid}"
                    res, a = record.cache_aware(model, audio, look_ahead, head, key)
                    ref["cache_aware"].append(
                        {"look_ahead": list(look_ahead), "head": head, "clip": cid, **res}
                    )
                    arrays.update(a)
        enc.set_default_att_context_size(default_context)
    if style == "chunked_limited_with_rc":
        ref["buffered"] = []
        for preset in BUFFERED_PRESETS:
            for cid, audio in zip(clip_ids, clips):
                key = f"buffered/{'_'.join(map(str, preset))}/{cid}"
                res, a = record.buffered(model, audio, preset, key)
                ref["buffered"].append({"preset": preset, "clip": cid, **res})
                arrays.update(a)
    return ref, arrays


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "nemo")
    parser.add_argument("--speech-data", type=Path, default=DEFAULT_SPEECH)
    parser.add_argument("--only", nargs="*", default=None, help="fixture names (default: all)")
    parser.add_argument(
        "--realistic",
        type=Path,
        default=None,
        help="write one realistic-size cache-aware checkpoint to this .nemo path and exit",
    )
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=16)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    clips = [load_clip(args.speech_data, cid) for cid in CLIPS]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_dir = train_tokenizer(args.speech_data, tmp)
        if args.realistic is not None:
            write_realistic(args.realistic, tokenizer_dir, args.d_model, args.layers, clips)
            return
        for name in args.only or list(configs.BUILDERS):
            path = build(name, tokenizer_dir, clips, args.out / name)
            ref, arrays = record_all(path, CLIPS, clips)
            ref["checkpoint_bytes"] = path.stat().st_size
            (args.out / name / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
            np.savez_compressed(args.out / name / "reference.npz", **arrays)
            logger.info("%s: %d bytes, %d arrays", name, path.stat().st_size, len(arrays))


def write_realistic(
    path: Path, tokenizer_dir: str, d_model: int, layers: int, clips: list[np.ndarray]
) -> None:
    import nemo.collections.asr.models as asr_models
    from omegaconf import OmegaConf

    torch.manual_seed(SEED)
    cfg = configs.realistic_cache_aware(tokenizer_dir, d_model=d_model, n_layers=layers)
    model = asr_models.EncDecHybridRNNTCTCBPEModel(cfg=OmegaConf.create(cfg), trainer=None).eval()
    shape_outputs(model, clips[:1])
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save_to(str(path))
    logger.info("realistic checkpoint: %s (%d parameters)", path, sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
