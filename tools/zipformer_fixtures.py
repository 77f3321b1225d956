"""Build a tiny random-weight Zipformer2 transducer with icefall's own code and record icefall's
own decoding of it on three dev clips: the parity fixtures under tests/fixtures/zipformer/.

Run by hand in a throwaway venv (never in the project's venv; tests never import icefall):

    python3 -m venv /tmp/ref-zip
    /tmp/ref-zip/bin/pip install torch==2.13.0          # first: the local CPU wheel
    /tmp/ref-zip/bin/pip install kaldi-native-fbank sentencepiece soundfile numpy packaging
    # icefall itself: `git archive` of github.com/k2-fsa/icefall (commit in reference.json) into ICEFALL
    /tmp/ref-zip/bin/python tools/zipformer_fixtures.py --icefall ICEFALL --out tests/fixtures/zipformer

What runs is icefall's: `train.get_params/add_model_arguments/get_model` build the model
(egs/librispeech/ASR/zipformer: Zipformer2, Conv2dSubsampling, Decoder, Joiner, AsrModel),
`beam_search.greedy_search_batch` and `beam_search.modified_beam_search` decode offline, and
`streaming_decode.decode_one_chunk` (with `decode_stream.DecodeStream`) runs the streaming chunk
loop with `streaming_beam_search.greedy_search` / `modified_beam_search`.

k2 is not installable here (its wheels pin an old torch). icefall needs it for the training losses
and a few decoding paths, but the model's forward touches it only for the SwooshL/SwooshR
activations (`k2.swoosh_l_forward`, a fused kernel of the formula scaling.py also writes out in
torch), and modified beam search only for two ragged-tensor helpers (`create_ragged_shape2`,
`RaggedTensor(...)[i]`). This script installs a stand-in `k2` module with exactly those, written
from their documented semantics, and empty stand-ins for the training-only imports (lhotse,
kaldialign, pypinyin, kaldifeat, tensorboard): nothing the recorded outputs depend on.

Features: kaldi-native-fbank (what sherpa feeds icefall models) with the training features'
settings (lhotse's FbankConfig, icefall's pretrained.py): 80 bins, dither 0, snip_edges=False,
high_freq=-400 (7600 Hz), samples in [-1, 1].

`tiny_offline` is trained-flag-for-flag what `train.py --causal 0` records: chunk_size
"16,32,64,-1" and left_context_frames "64,128,256,-1" stay at their defaults (icefall ignores them
when not causal), and it is written by icefall's own `icefall.checkpoint.save_checkpoint` with
train.py's `params` as `epoch-1.pt` (no model_args.json: the loader reads the recorded arguments).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.abc
import importlib.machinery
import json
import logging
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

logger = logging.getLogger("zipformer_fixtures")

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPEECH = REPO.parent / "shared" / "data" / "speech"
CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "ps_goforward")
"""16 kHz mono clips: the tests read them with soundfile unchanged (no resampling to disagree on)."""
VOCAB_SIZE = 128
SEED = 20261203
BEAM = 4
STREAMING_SETTINGS = ((16, 64), (32, 128))
"""(chunk_size, left_context_frames) at the 50 Hz embed rate: two of icefall's trained pairs."""
TARGET_TOKEN_RATE = 0.4
"""Tokens per encoder frame the blank bias is tuned to (offline greedy over the clips)."""
ENCODER_GAIN = 2.0
"""Standard deviation the joiner's projected encoder frames are scaled to."""
OUTPUT_SCALE = 8.0
"""Joiner output rows are centred and scaled by this: wider gaps between the best two logits, so
float32 reordering between implementations cannot flip an argmax."""

# A small model with icefall's streaming recipe's structure: six stacks at 1,2,4,8,4,2x, causal.
MODEL_ARGS: dict[str, Any] = {
    "num_encoder_layers": "1,1,1,2,1,1",
    "downsampling_factor": "1,2,4,8,4,2",
    "feedforward_dim": "64,96,128,128,128,96",
    "num_heads": "2,2,2,4,2,2",
    "encoder_dim": "32,48,64,64,64,48",
    "encoder_unmasked_dim": "32,32,48,48,48,32",
    "query_head_dim": "8",
    "value_head_dim": "6",
    "pos_head_dim": "4",
    "pos_dim": 16,
    "cnn_module_kernel": "15,15,7,7,7,15",
    "decoder_dim": 48,
    "joiner_dim": 48,
    "context_size": 2,
    "causal": True,
    "chunk_size": "16,32,64,-1",
    "left_context_frames": "64,128,256,-1",
    "use_transducer": True,
    "use_ctc": False,
    "use_attention_decoder": False,
}


OFFLINE_MODEL_ARGS: dict[str, Any] = {
    **MODEL_ARGS,
    "num_encoder_layers": "1,1,1,1,1,1",
    "encoder_dim": "32,48,64,80,64,48",
    "feedforward_dim": "64,96,128,160,128,96",
    "encoder_unmasked_dim": "32,32,48,48,48,32",
    "cnn_module_kernel": "31,31,15,15,15,31",
    "context_size": 1,
    "causal": False,
    "chunk_size": "16,32,64,-1",
    "left_context_frames": "64,128,256,-1",
}
"""A non-streaming model (icefall's default librispeech recipe is causal=False): symmetric
convolutions, a middle stack wider than the last (the output takes channels from it), and a
context-size-1 predictor (no conv)."""
MODELS = {"tiny_streaming": (MODEL_ARGS, STREAMING_SETTINGS, "reference.json"),
          "tiny_offline": (OFFLINE_MODEL_ARGS, (), "reference_tiny_offline.json")}
TRAINING_CHECKPOINTS = ("tiny_offline",)
"""Models written as icefall's training writes them (save_checkpoint: state dict plus every
training parameter) rather than as export.py's pretrained.pt + our model_args.json."""


# ---------------------------------------------------------------------------------------------
# Stand-ins for modules icefall imports but the recorded computations do not use.


class _Meta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything

    def __getitem__(cls, key: Any) -> Any:
        return cls


class _Anything(metaclass=_Meta):
    """Subclassable, callable, iterable, attribute-rich placeholder for training-only names (its
    class answers attribute and subscript lookups too: `Name.method`, `Tuple[...]`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Anything()

    def __getattr__(self, name: str) -> Any:
        return _Anything()

    def __iter__(self) -> Any:
        return iter(())


class StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name in ("__file__", "__spec__", "__loader__", "__path__", "__all__", "__wrapped__"):
            raise AttributeError(name)
        return "stand-in" if name.startswith("__") else _Anything


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = roots

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in self.roots or fullname.startswith("torch.utils.tensorboard"):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = StubModule(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]
        module.__file__ = __file__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _swoosh_l(x: torch.Tensor) -> torch.Tensor:
    return torch.logaddexp(torch.zeros_like(x), x - 4.0) - 0.08 * x - 0.035


def _swoosh_r(x: torch.Tensor) -> torch.Tensor:
    return torch.logaddexp(torch.zeros_like(x), x - 1.0) - 0.08 * x - 0.313261687


class _RaggedShape2:
    """k2's two-axis RaggedShape: row_splits over axis 1."""

    def __init__(self, row_splits: torch.Tensor) -> None:
        self._splits = row_splits.to(torch.int32)

    def to(self, device: Any) -> _RaggedShape2:
        return _RaggedShape2(self._splits.to(device))

    def row_splits(self, axis: int) -> torch.Tensor:
        assert axis == 1
        return self._splits

    def row_ids(self, axis: int) -> torch.Tensor:
        assert axis == 1
        counts = self._splits[1:] - self._splits[:-1]
        return torch.repeat_interleave(torch.arange(len(counts), dtype=torch.int32), counts.long())


class _RaggedTensor:
    def __init__(self, shape: _RaggedShape2, value: torch.Tensor) -> None:
        self.shape, self.values = shape, value

    def __getitem__(self, i: int) -> torch.Tensor:
        s = self.shape.row_splits(1)
        return self.values[int(s[i]) : int(s[i + 1])]


def install_stubs() -> None:
    k2 = StubModule("k2")
    k2.__path__ = []  # type: ignore[attr-defined]
    k2.__file__ = __file__  # icefall's env info prints where k2 came from
    k2.swoosh_l_forward = _swoosh_l  # type: ignore[attr-defined]
    k2.swoosh_r_forward = _swoosh_r  # type: ignore[attr-defined]
    k2.swoosh_l = _swoosh_l  # type: ignore[attr-defined]
    k2.swoosh_r = _swoosh_r  # type: ignore[attr-defined]
    k2.RaggedTensor = _RaggedTensor  # type: ignore[attr-defined]
    ragged = StubModule("k2.ragged")
    ragged.create_ragged_shape2 = lambda row_splits, cached_tot_size=-1: _RaggedShape2(row_splits)  # type: ignore[attr-defined]
    k2.ragged = ragged  # type: ignore[attr-defined]
    version = StubModule("k2.version")
    k2.version = version  # type: ignore[attr-defined]
    sys.modules.update({"k2": k2, "k2.ragged": ragged, "k2.version": version})
    sys.meta_path.insert(0, StubFinder(("lhotse", "kaldialign", "pypinyin", "kaldifeat", "tensorboard")))


def import_icefall(icefall: Path) -> dict[str, Any]:
    install_stubs()
    recipe = icefall / "egs" / "librispeech" / "ASR" / "zipformer"
    sys.path[:0] = [str(recipe), str(icefall)]
    import beam_search
    import decode_stream
    import streaming_beam_search
    import streaming_decode
    import train
    from icefall import checkpoint

    return {"train": train, "checkpoint": checkpoint, "beam_search": beam_search, "streaming_decode": streaming_decode,
            "streaming_beam_search": streaming_beam_search, "decode_stream": decode_stream}  # fmt: skip


# ---------------------------------------------------------------------------------------------


def read_clip(speech: Path, clip_id: str) -> np.ndarray:
    import soundfile as sf

    rows = [json.loads(line) for line in (speech / "manifest.jsonl").read_text().splitlines() if line.strip()]
    row = next(r for r in rows if r["id"] == clip_id)
    data, rate = sf.read(str(speech / row["audio"]), dtype="float32", always_2d=True)
    assert rate == 16000 and data.shape[1] == 1, (clip_id, rate, data.shape)
    return np.ascontiguousarray(data[:, 0])


def fbank(samples: np.ndarray) -> torch.Tensor:
    import kaldi_native_fbank as knf

    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0
    opts.frame_opts.snip_edges = False
    opts.frame_opts.samp_freq = 16000
    opts.mel_opts.num_bins = 80
    opts.mel_opts.high_freq = -400  # lhotse's FbankConfig (icefall's training features), sherpa-onnx
    online = knf.OnlineFbank(opts)
    online.accept_waveform(16000, samples.tolist())
    online.input_finished()
    return torch.tensor(np.stack([online.get_frame(i) for i in range(online.num_frames_ready)]), dtype=torch.float32)


def train_bpe(speech: Path, out_dir: Path) -> Path:
    """icefall's recipe (local/train_bpe_model.py): <blk>=0 and <sos/eos>=1 as user symbols, unk 2."""
    import sentencepiece as spm

    rows = [json.loads(line) for line in (speech / "manifest.jsonl").read_text().splitlines() if line.strip()]
    text = out_dir / "transcripts.txt"
    text.write_text("\n".join(r["text"].upper() for r in rows if r.get("text")) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text), vocab_size=VOCAB_SIZE, model_type="bpe", model_prefix=str(out_dir / "bpe"),
        character_coverage=1.0, user_defined_symbols=["<blk>", "<sos/eos>"], unk_id=2, bos_id=-1, eos_id=-1,
    )  # fmt: skip
    text.unlink()
    (out_dir / "bpe.vocab").unlink()
    sp = spm.SentencePieceProcessor()
    sp.load(str(out_dir / "bpe.model"))
    (out_dir / "tokens.txt").write_text("".join(f"{sp.id_to_piece(i)} {i}\n" for i in range(sp.get_piece_size())))
    return out_dir / "bpe.model"


def build_model(mods: dict[str, Any], vocab_size: int, model_args: dict[str, Any]) -> tuple[torch.nn.Module, Any]:
    train = mods["train"]
    parser = argparse.ArgumentParser()
    train.add_model_arguments(parser)
    args = parser.parse_args([])
    params = train.get_params()
    params.update(vars(args))
    params.update(model_args)
    params.update({"vocab_size": vocab_size, "blank_id": 0})
    torch.manual_seed(SEED)
    model = train.get_model(params)
    model.eval()
    model.device = torch.device("cpu")
    return model, params


@torch.no_grad()
def shape_outputs(model: torch.nn.Module, feats: list[torch.Tensor]) -> None:
    """Random weights give nearly the same encoder output on every frame, so one token wins
    everywhere. Centre the joiner's encoder projection on the clips' mean frame and scale it up
    (frames differ), centre and scale the output rows (wide gaps between the best two logits),
    then raise blank's bias until about TARGET_TOKEN_RATE of the frames emit."""
    encs = []
    for f in feats:
        enc, _ = model.forward_encoder(f.unsqueeze(0), torch.tensor([f.shape[0]]))
        encs.append(enc[0])
    enc = torch.cat(encs)  # (T, C) all clips' frames
    proj = model.joiner.encoder_proj
    proj.weight.mul_(ENCODER_GAIN / proj(enc).std().clamp_min(1e-6))
    proj.bias.sub_(proj(enc).mean(dim=0))
    out = model.joiner.output_linear
    out.weight.sub_(out.weight.mean(dim=0, keepdim=True)).mul_(OUTPUT_SCALE)
    out.bias.zero_()
    dec = model.decoder(torch.tensor([[-1, 0]]), need_pad=False)  # (1, 1, D): the start context
    logits = model.joiner(enc.unsqueeze(1).unsqueeze(1), dec.unsqueeze(1))[:, 0, 0]  # (T, V)
    margins = logits[:, 1:].max(dim=-1).values - logits[:, 0]
    out.bias[0] = float(torch.quantile(margins, 1.0 - TARGET_TOKEN_RATE))


def _plain_env(env: dict[str, Any], icefall_commit: str) -> dict[str, Any]:
    """get_env_info()'s record with the stand-ins' values as text (a pickled stand-in class would
    not load outside this script), icefall's commit as given (get_env_info asks git in the current
    directory, this repository), and without this host's name, address and paths."""
    plain = (str, int, float, bool, type(None))
    dropped = ("hostname", "IP address", "icefall-git-branch", "icefall-git-date", "icefall-path", "k2-path",
               "lhotse-path")  # fmt: skip
    out = {k: v if isinstance(v, plain) else repr(v) for k, v in env.items() if k not in dropped}
    return {**out, "icefall-git-sha1": icefall_commit}


def nbest_of(hyps: Any, context_size: int) -> list[dict[str, Any]]:
    """All hypotheses, best first by icefall's final criterion (log_prob / len(ys))."""
    items = sorted(hyps, key=lambda h: float(h.log_prob) / len(h.ys), reverse=True)
    return [{"tokens": [int(t) for t in h.ys[context_size:]], "log_prob": float(h.log_prob),
             "timestamps": [int(t) for t in h.timestamp] if getattr(h, "timestamp", None) else []} for h in items]  # fmt: skip


@torch.no_grad()
def offline(mods: dict[str, Any], model: torch.nn.Module, f: torch.Tensor, context_size: int) -> dict[str, Any]:
    bs = mods["beam_search"]
    model.encoder.chunk_size, model.encoder.left_context_frames = [-1], [-1]
    enc, enc_lens = model.forward_encoder(f.unsqueeze(0), torch.tensor([f.shape[0]]))
    greedy = bs.greedy_search_batch(model=model, encoder_out=enc, encoder_out_lens=enc_lens, return_timestamps=True)
    captured: list[Any] = []
    original = bs.HypothesisList.get_most_probable

    def capture(self: Any, length_norm: bool = False) -> Any:
        captured.append(list(self))
        return original(self, length_norm=length_norm)

    bs.HypothesisList.get_most_probable = capture
    try:
        beam = bs.modified_beam_search(model=model, encoder_out=enc, encoder_out_lens=enc_lens, beam=BEAM,
                                       return_timestamps=True)  # fmt: skip
    finally:
        bs.HypothesisList.get_most_probable = original
    return {
        "encoder_frames": int(enc_lens[0]),
        "greedy": {"tokens": [int(t) for t in greedy.hyps[0]], "timestamps": [int(t) for t in greedy.timestamps[0]]},
        "modified_beam_search": {"beam": BEAM, "best": [int(t) for t in beam.hyps[0]],
                                 "nbest": nbest_of(captured[0], context_size)},
        "encoder_out_head": enc[0, :4].tolist(),
    }


@torch.no_grad()
def streaming(mods: dict[str, Any], model: torch.nn.Module, params: Any, f: torch.Tensor, chunk: int, left: int,
              method: str) -> dict[str, Any]:  # fmt: skip
    sd, ds = mods["streaming_decode"], mods["decode_stream"]
    model.encoder.chunk_size, model.encoder.left_context_frames = [chunk], [left]
    p = dict(params)
    p.update({"chunk_size": chunk, "left_context_frames": left, "decoding_method": method, "num_active_paths": BEAM})
    p = type(params)(p)
    stream = ds.DecodeStream(params=p, cut_id="x", initial_states=sd.get_init_states(model=model, batch_size=1),
                             device=torch.device("cpu"))  # fmt: skip
    stream.set_features(f, tail_pad_len=30)
    steps = 0
    while not stream.done:
        sd.decode_one_chunk(params=p, model=model, decode_streams=[stream])
        steps += 1
    out: dict[str, Any] = {"chunk_size": chunk, "left_context_frames": left, "steps": steps,
                           "tokens": [int(t) for t in stream.decoding_result()]}  # fmt: skip
    if method == "modified_beam_search":
        out["nbest"] = nbest_of(list(stream.hyps), params["context_size"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--icefall", type=Path, required=True, help="icefall source tree (git archive)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--speech", type=Path, default=DEFAULT_SPEECH)
    ap.add_argument("--icefall-commit", default="", help="recorded in reference.json")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    mods = import_icefall(args.icefall)
    samples = {c: read_clip(args.speech, c) for c in CLIPS}
    feats = {c: fbank(s) for c, s in samples.items()}
    for name in args.models:
        record(mods, args, name, samples, feats)
    np.savez_compressed(args.out / "features.npz", **{c: feats[c].numpy() for c in CLIPS})


def record(mods: dict[str, Any], args: argparse.Namespace, name: str, samples: dict[str, np.ndarray],
           feats: dict[str, torch.Tensor]) -> None:  # fmt: skip
    """Build model `name` of MODELS, write its checkpoint directory and icefall's outputs on it."""
    import sentencepiece as spm

    model_args_in, settings, reference_name = MODELS[name]
    ckpt_dir = args.out / name
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    sp = spm.SentencePieceProcessor()
    sp.load(str(train_bpe(args.speech, ckpt_dir)))
    model, params = build_model(mods, sp.get_piece_size(), model_args_in)
    model.encoder.chunk_size, model.encoder.left_context_frames = [-1], [-1]
    shape_outputs(model, list(feats.values()))
    model_args = dict(model_args_in, vocab_size=sp.get_piece_size(), blank_id=0, feature_dim=80)
    if name in TRAINING_CHECKPOINTS:
        params.update({"epoch": 1, "batch_idx_train": 0, "env_info": _plain_env(params["env_info"], args.icefall_commit)})
        mods["checkpoint"].save_checkpoint(filename=ckpt_dir / "epoch-1.pt", model=model, params=params)
    else:
        torch.save({"model": model.state_dict()}, ckpt_dir / "pretrained.pt")  # as icefall's export.py writes it
        (ckpt_dir / "model_args.json").write_text(json.dumps(model_args, indent=1) + "\n")
    ctx = params["context_size"]
    reference: dict[str, Any] = {
        "icefall_commit": args.icefall_commit, "torch": torch.__version__, "model_args": model_args,
        "parameters": sum(p.numel() for p in model.parameters()), "clips": {},
    }  # fmt: skip
    for c in CLIPS:
        f = feats[c]
        row: dict[str, Any] = {
            "samples": len(samples[c]), "sha256_float32": hashlib.sha256(samples[c].tobytes()).hexdigest(),
            "feature_frames": f.shape[0], "offline": offline(mods, model, f, ctx), "streaming": [],
        }  # fmt: skip
        for chunk, left in settings:
            g = streaming(mods, model, params, f, chunk, left, "greedy_search")
            b = streaming(mods, model, params, f, chunk, left, "modified_beam_search")
            row["streaming"].append({"chunk_size": chunk, "left_context_frames": left, "steps": g["steps"],
                                     "greedy": g["tokens"],
                                     "modified_beam_search": {"beam": BEAM, "best": b["tokens"], "nbest": b["nbest"]}})  # fmt: skip
        logger.info("%s %s: offline greedy %d tokens %r", name, c, len(row["offline"]["greedy"]["tokens"]),
                    sp.decode(row["offline"]["greedy"]["tokens"]))  # fmt: skip
        for s in row["streaming"]:
            logger.info("  chunk %d: greedy %d tokens, beam best %d", s["chunk_size"], len(s["greedy"]),
                        len(s["modified_beam_search"]["best"]))  # fmt: skip
        reference["clips"][c] = row
    (args.out / reference_name).write_text(json.dumps(reference, indent=1) + "\n")
    logger.info("wrote %s (%d parameters)", ckpt_dir, reference["parameters"])


if __name__ == "__main__":
    main()
