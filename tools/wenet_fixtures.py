"""Build a tiny U2++ Conformer with WeNet's own code and record WeNet's own decoding of it on three
dev clips: the parity fixtures under tests/fixtures/wenet/.

Run by hand (tests never import WeNet):

    # WeNet itself: `git archive HEAD wenet examples` of github.com/wenet-e2e/wenet (commit in
    # reference.json) into WENET; the project's venv has torch, kaldi-native-fbank, soundfile, yaml
    .venv/bin/python tools/wenet_fixtures.py --wenet WENET --out tests/fixtures/wenet --speech ../shared/data/speech

What runs is WeNet's: the configuration is its aishell U2++ recipe
(examples/aishell/s0/conf/train_u2++_conformer.yaml) at tiny sizes, completed and written to
train.yaml by `wenet.utils.train_utils.check_modify_and_save_config` as training does; the model
is `wenet.utils.init_model.init_model`'s (its GlobalCMVN read from the JSON statistics by
`wenet.utils.cmvn.load_cmvn`); the weights are written by `wenet.utils.checkpoint.save_checkpoint`;
the outputs are `ASRModel.decode` (ctc_greedy_search, ctc_prefix_beam_search,
attention_rescoring) with a 16-frame decoding chunk and full left context, the way WeNet's
recognize.py decodes a U2++ model.

Features: WeNet's `processor.compute_fbank` is torchaudio's `kaldi.fbank` on samples scaled by
2^15 with dither 0 and energy_floor 0 (povey window, snip_edges); torchaudio is not installable next
to this torch, so kaldi-native-fbank computes the same Kaldi fbank. The CMVN statistics are those
of WeNet's tools/compute_cmvn_stats.py (`{mean_stat, var_stat, frame_num}`) over the three clips.

WeNet imports modules its inference never runs (librosa, torchaudio, whisper's language table,
deepspeed ...): the Zipformer tool's stand-ins are installed for them; and its squeezeformer module imports typing names
through torch.nn.modules.conv, which older torch re-exported (set back here).

Random weights give one token on every frame, so the CTC output layer is shaped as the Zipformer
fixtures' joiner is: rows centred and scaled, blank's bias raised until about TARGET_TOKEN_RATE of
the frames emit a token.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import typing
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

logger = logging.getLogger("wenet_fixtures")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.zipformer_fixtures import StubFinder, StubModule, read_clip  # noqa: E402

CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "ps_goforward")
SEED = 20261205
BEAM = 4
CHUNK = 16
"""Decoding chunk (encoder frames), full left context."""
CTC_WEIGHT = 0.5
"""Attention rescoring's CTC weight (WeNet runtime's default, the engine's too)."""
TARGET_TOKEN_RATE = 0.35
OUTPUT_SCALE = 6.0
RECIPE = "examples/aishell/s0/conf/train_u2++_conformer.yaml"
TINY = {
    "encoder_conf": {"output_size": 64, "attention_heads": 4, "linear_units": 128, "num_blocks": 2,
                     "cnn_module_kernel": 8},
    "decoder_conf": {"attention_heads": 4, "linear_units": 128, "num_blocks": 1, "r_num_blocks": 1},
}  # fmt: skip
"""The recipe's sizes shrunk; every other setting is the recipe's."""
STUBBED = ("librosa", "torchaudio", "whisper", "tiktoken", "deepspeed", "peft", "k2", "icefall", "langid", "jieba",
           "pypinyin", "paddle", "tensorboardX")  # fmt: skip


def import_wenet(wenet: Path) -> dict[str, Any]:
    import torch.nn.modules.conv as conv

    conv.Union, conv.Optional, conv.Tensor = typing.Union, typing.Optional, torch.Tensor  # type: ignore[attr-defined]
    sys.meta_path.insert(0, StubFinder(STUBBED))
    deepspeed = StubModule("deepspeed")
    deepspeed.__path__ = []  # type: ignore[attr-defined]
    deepspeed.add_config_arguments = lambda parser: parser  # type: ignore[attr-defined]  # its own flags: unused
    sys.modules["deepspeed"] = deepspeed
    sys.path.insert(0, str(wenet))
    from wenet.utils import checkpoint, init_model, init_tokenizer, train_utils

    return {"init_model": init_model, "init_tokenizer": init_tokenizer, "train_utils": train_utils,
            "checkpoint": checkpoint}


def fbank(samples: np.ndarray) -> torch.Tensor:
    """WeNet's compute_fbank settings: int16-scaled samples, 80 bins, 25/10 ms, dither 0,
    energy_floor 0, povey window, snip_edges (torchaudio kaldi.fbank's defaults)."""
    import kaldi_native_fbank as knf

    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0
    opts.frame_opts.samp_freq = 16000
    opts.frame_opts.snip_edges = True
    opts.frame_opts.window_type = "povey"
    opts.energy_floor = 0.0
    opts.mel_opts.num_bins = 80
    online = knf.OnlineFbank(opts)
    online.accept_waveform(16000, (samples * 32768.0).tolist())
    online.input_finished()
    return torch.tensor(np.stack([online.get_frame(i) for i in range(online.num_frames_ready)]), dtype=torch.float32)


def write_units(speech: Path, out: Path) -> None:
    """A character table in the recipe's layout: <blank> 0, <unk> 1, <sos/eos> 2, then the
    characters of the dev transcripts (a space as ▁)."""
    rows = [json.loads(line) for line in (speech / "manifest.jsonl").read_text().splitlines() if line.strip()]
    chars = sorted({c for r in rows if r.get("text") for c in r["text"].upper().replace(" ", "▁")})
    table = {"<blank>": 0, "<unk>": 1, "<sos/eos>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    (out / "units.txt").write_text("".join(f"{u} {i}\n" for u, i in table.items()), encoding="utf-8")


def write_cmvn(feats: list[torch.Tensor], out: Path) -> None:
    """tools/compute_cmvn_stats.py's JSON: per-bin sums and sums of squares, and the frame count."""
    allf = torch.cat(feats).double()
    stats = {"mean_stat": allf.sum(0).tolist(), "var_stat": allf.square().sum(0).tolist(), "frame_num": allf.shape[0]}
    (out / "global_cmvn").write_text(json.dumps(stats))


def training_args(train_utils: Any, wenet: Path, ckpt: Path) -> argparse.Namespace:
    """wenet/bin/train.py's arguments (its get_args: the same parsers) for a CPU run of the recipe."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--train_engine", default="torch_ddp")
    parser.add_argument("--device", default="cpu")
    for add in ("add_model_args", "add_dataset_args", "add_ddp_args", "add_lora_args", "add_deepspeed_args",
                "add_fsdp_args", "add_trace_args"):  # fmt: skip
        parser = getattr(train_utils, add)(parser)
    return parser.parse_args(["--config", str(wenet / RECIPE), "--model_dir", str(ckpt), "--train_data", "-",
                              "--cv_data", "-"])  # fmt: skip


def configs_for(wenet: Path, out: Path) -> dict[str, Any]:
    configs = yaml.safe_load((wenet / RECIPE).read_text())
    for section, values in TINY.items():
        configs[section].update(values)
    configs["tokenizer_conf"]["symbol_table_path"] = str(out / "units.txt")
    configs["cmvn_conf"]["cmvn_file"] = str(out / "global_cmvn")
    return configs


@torch.no_grad()
def shape_ctc(model: torch.nn.Module, feats: list[torch.Tensor]) -> None:
    """Centre and scale the CTC projection's rows, then raise blank's bias until about
    TARGET_TOKEN_RATE of the frames (16-frame chunks) pick another token."""
    encs = []
    for f in feats:
        enc, _ = model._forward_encoder(f.unsqueeze(0), torch.tensor([f.shape[0]]), CHUNK, -1, False)
        encs.append(enc[0])
    enc = torch.cat(encs)
    lo = model.ctc.ctc_lo
    lo.weight.sub_(lo.weight.mean(dim=0, keepdim=True))
    lo.weight.mul_(OUTPUT_SCALE / (enc @ lo.weight.T).std().clamp_min(1e-6))
    lo.bias.zero_()
    logits = lo(enc)
    margins = logits[:, 1:].max(dim=-1).values - logits[:, 0]
    lo.bias[0] = float(torch.quantile(margins, 1.0 - TARGET_TOKEN_RATE))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wenet", type=Path, required=True, help="WeNet source tree (git archive)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--speech", type=Path, required=True)
    ap.add_argument("--wenet-commit", default="", help="recorded in reference.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    mods = import_wenet(args.wenet)
    ckpt = args.out / "u2pp"
    ckpt.mkdir(parents=True, exist_ok=True)
    samples = {c: read_clip(args.speech, c) for c in CLIPS}
    feats = {c: fbank(s) for c, s in samples.items()}
    write_units(args.speech, ckpt)
    write_cmvn(list(feats.values()), ckpt)
    configs = configs_for(args.wenet, ckpt)
    train_args = training_args(mods["train_utils"], args.wenet, ckpt)
    tokenizer = mods["init_tokenizer"].init_tokenizer(configs)
    configs["vocab_size"] = tokenizer.vocab_size()  # as train_utils.init_dataset_and_dataloader sets it
    configs = mods["train_utils"].check_modify_and_save_config(train_args, configs, tokenizer.symbol_table)
    torch.manual_seed(SEED)
    model, configs = mods["init_model"].init_model(argparse.Namespace(), configs)
    model.eval()
    shape_ctc(model, list(feats.values()))
    mods["checkpoint"].save_checkpoint(model, str(ckpt / "final.pt"), {"epoch": 0, "step": 0})
    # the training machine's paths, as a real train.yaml carries them; the loader falls back to the dir
    text = (ckpt / "train.yaml").read_text().replace(str(ckpt) + "/", "data/train/")
    (ckpt / "train.yaml").write_text(text)
    reference: dict[str, Any] = {"wenet_commit": args.wenet_commit, "torch": torch.__version__, "chunk": CHUNK,
                                 "beam": BEAM, "ctc_weight": CTC_WEIGHT, "clips": {}}  # fmt: skip
    reverse_weight = float(configs["model_conf"]["reverse_weight"])
    for c in CLIPS:
        f = feats[c]
        with torch.no_grad():
            res = model.decode(["ctc_greedy_search", "ctc_prefix_beam_search", "attention_rescoring"], f.unsqueeze(0),
                               torch.tensor([f.shape[0]]), beam_size=BEAM, decoding_chunk_size=CHUNK,
                               num_decoding_left_chunks=-1, ctc_weight=CTC_WEIGHT, reverse_weight=reverse_weight)  # fmt: skip
        row = {"samples": len(samples[c]), "sha256_float32": hashlib.sha256(samples[c].tobytes()).hexdigest(),
               "feature_frames": f.shape[0],
               "ctc_greedy_search": [int(t) for t in res["ctc_greedy_search"][0].tokens],
               "ctc_prefix_beam_search": [int(t) for t in res["ctc_prefix_beam_search"][0].tokens],
               "attention_rescoring": [int(t) for t in res["attention_rescoring"][0].tokens]}  # fmt: skip
        logger.info("%s: greedy %d tokens, beam %d, rescored %d (%s)", c, len(row["ctc_greedy_search"]),
                    len(row["ctc_prefix_beam_search"]), len(row["attention_rescoring"]),
                    row["attention_rescoring"] != row["ctc_prefix_beam_search"])  # fmt: skip
        reference["clips"][c] = row
    (args.out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    np.savez_compressed(args.out / "features.npz", **{c: feats[c].numpy() for c in CLIPS})


if __name__ == "__main__":
    main()
