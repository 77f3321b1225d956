"""Write the Paraformer parity fixtures with FunASR itself: a tiny random checkpoint and FunASR's
own outputs on dev clips.

Runs in a throwaway venv that has the `funasr` package (never in the project's venv):

    python3 -m venv /tmp/ref-para
    /tmp/ref-para/bin/pip install torch==2.13.0          # first: the local CPU wheel
    echo torch==2.13.0 > /tmp/c.txt
    /tmp/ref-para/bin/pip install -c /tmp/c.txt scipy librosa soundfile soxr PyYAML omegaconf \
        hydra-core sentencepiece kaldiio jieba jaconv torch_complex rapidfuzz six tqdm requests \
        regex kaldi-native-fbank==1.23.0
    /tmp/ref-para/bin/pip install --no-deps funasr==1.4.16
    /tmp/ref-para/bin/python tools/paraformer_fixtures.py --out tests/fixtures/paraformer

What it does:
1. writes a FunASR model directory of our own tiny sizes: `config.yaml` (FunASR's schema:
   SANMEncoder, CifPredictorV2, ParaformerSANMDecoder, WavFrontend with LFR 7/6), `tokens.json`
   (English pieces with FunASR's `@@` continuation mark, single letters and a few CJK characters,
   so every branch of FunASR's sentence post-processing is reached) and `am.mvn` (Kaldi nnet
   CMVN measured on the clips with FunASR's own front end, so the random encoder sees unit-scale
   input);
2. builds the model with FunASR's registered `Paraformer` class, seeds it and saves its state
   dict as `model.pt`, as FunASR's released checkpoints are;
3. loads that directory back through `funasr.AutoModel` (local path: nothing is downloaded) and
   records, per clip, FunASR's token ids (`inference` with no tokenizer), its text and its
   timestamps (`generate`, with and without `output_timestamp`), alone and as one padded batch;
4. records FunASR's `sentence_postprocess` on a few crafted token sequences (abbreviations, CJK
   beside words, specials, a dangling `@@` piece);
5. builds `seaco/`, a SeacoParaformer (hotwords) of the same tiny sizes with a `seg_dict`, and
   records its tokens per clip without and with a hotword file;
6. builds `online/`, a ParaformerStreaming (paraformer-online: SANMEncoderChunkOpt, a causal
   decoder FSMN, WavFrontendOnline) of the same tiny sizes, and records FunASR's streaming
   `generate` per clip: the clip fed 600 ms at a time (`chunk_size`, `cache`, `is_final` on the
   last call), the token ids each call returned, under the `ONLINE_SETTINGS` look-backs;
7. writes `bpe.model`, a tiny SentencePiece model trained on the dev transcripts with as many
   pieces as `tiny/` has tokens, and records FunASR's text for each clip when `tiny/`'s weights
   are read with that model as the tokenizer (`SentencepiecesTokenizer`, its pieces as the token
   list).

kaldi-native-fbank stands in for torchaudio (FunASR's own fallback in funasr.utils.fbank):
torchaudio has no wheel for torch 2.13.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr
import torch
import yaml

logger = logging.getLogger("paraformer_fixtures")

SAMPLE_RATE = 16000  # Hz
SEED = 20261203
CLIPS = ("mfa_her", "mfa_thoughts", "mfa_um", "libri_61-70968-0000")
"""Dev clips of about 1, 3, 5 and 5 s (ids in ../shared/data/speech/manifest.jsonl)."""

TINY = {
    "encoder_conf": {"output_size": 64, "attention_heads": 4, "linear_units": 128, "num_blocks": 3},
    "decoder_conf": {"attention_heads": 4, "linear_units": 128, "num_blocks": 3, "att_layer_num": 2},
}
"""Tiny sizes; the layout is FunASR's paraformer-large one (50 encoder blocks, 16 decoder blocks
of d_model 512 there). num_blocks 3 > att_layer_num 2 puts one block in `decoders2` too."""

CJK = "你好我们是的在有"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def config(vocab_size: int) -> dict[str, Any]:
    """A config.yaml in FunASR's schema, with paraformer-large's options and TINY's sizes."""
    return {
        "model": "Paraformer",
        "model_conf": {"ctc_weight": 0.0, "lsm_weight": 0.1, "length_normalized_loss": True,
                       "predictor_weight": 1.0, "predictor_bias": 1, "sampling_ratio": 0.75},
        "encoder": "SANMEncoder",
        "encoder_conf": {**TINY["encoder_conf"], "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                         "attention_dropout_rate": 0.1, "input_layer": "pe",
                         "pos_enc_class": "SinusoidalPositionEncoder", "normalize_before": True,
                         "kernel_size": 11, "sanm_shfit": 0, "selfattention_layer_type": "sanm"},
        "decoder": "ParaformerSANMDecoder",
        "decoder_conf": {**TINY["decoder_conf"], "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                         "self_attention_dropout_rate": 0.1, "src_attention_dropout_rate": 0.1,
                         "kernel_size": 11, "sanm_shfit": 0},
        "predictor": "CifPredictorV2",
        "predictor_conf": {"idim": TINY["encoder_conf"]["output_size"], "threshold": 1.0, "l_order": 1,
                           "r_order": 1, "tail_threshold": 0.45},
        "frontend": "WavFrontend",
        "frontend_conf": {"fs": SAMPLE_RATE, "window": "hamming", "n_mels": 80, "frame_length": 25,
                          "frame_shift": 10, "lfr_m": 7, "lfr_n": 6, "dither": 0.0},
        "specaug": None,
        "normalize": None,
        "tokenizer": "CharTokenizer",
        "tokenizer_conf": {"unk_symbol": "<unk>", "split_with_space": True},
        "input_size": 560,
        "vocab_size": vocab_size,
    }


SEACO = {
    "model_conf": {"inner_dim": 64, "bias_encoder_type": "lstm", "bias_encoder_bid": False,
                   "seaco_lsm_weight": 0.1, "seaco_length_normalized_loss": True, "NO_BIAS": 5},
    "seaco_decoder": "ParaformerSANMDecoder",
    "seaco_decoder_conf": {"attention_heads": 4, "linear_units": 96, "num_blocks": 2, "att_layer_num": 2,
                           "kernel_size": 21, "sanm_shfit": 0, "dropout_rate": 0.1, "use_output_layer": False,
                           "wo_input_layer": True},
}
"""SeacoParaformer's extra parts (contextual hotwords), as in FunASR's released seaco model
(a 2-layer LSTM bias encoder over the decoder's token embedding, a SANM decoder attending to the
hotwords, `hotword_output_layer`, NO_BIAS the class meaning 'no hotword here'), at tiny sizes."""
HOTWORDS = ("curtain", "your wizard", "left", "confused complaint")
"""Hotwords (one per line of FunASR's hotword file); 'wizard' and 'complaint' go through seg_dict."""


ONLINE = {
    "encoder": "SANMEncoderChunkOpt",
    "encoder_conf": {"input_layer": "pe_online", "chunk_size": [12, 15], "stride": [8, 10], "pad_left": [0, 0],
                     "encoder_att_look_back_factor": [4, 4], "decoder_att_look_back_factor": [1, 1]},
    "decoder_conf": {"att_layer_num": 3, "sanm_shfit": 5},
    "frontend": "WavFrontendOnline",
}
"""paraformer-zh-streaming's layout: the chunked SAN-M encoder with streaming positions (its
chunk_size / stride are training settings: inference takes `chunk_size` per call), every decoder
block cross-attending, and the decoder FSMN shifted to be causal (kernel 11, shift 5)."""
ONLINE_SETTINGS = (
    {"chunk_size": [0, 10, 5], "encoder_chunk_look_back": 4, "decoder_chunk_look_back": 1},
    {"chunk_size": [0, 8, 4], "encoder_chunk_look_back": 0, "decoder_chunk_look_back": 0},
)
"""FunASR's documented streaming settings (600 ms chunks, 300 ms look-ahead, 4 encoder chunks and
1 decoder chunk of look-back), and its 480 ms variant without look-back caches."""
ONLINE_TRIMMED = {"libri_61-70968-0000": 6 * 9600 + 480}
"""Clips also streamed cut to this many samples: less than one frame (960 samples) past the last
whole chunk, where FunASR's last call runs on the previous window's look-ahead alone."""
CHUNK_SAMPLES_PER_FRAME = 960
"""Samples of one LFR frame at 16 kHz (60 ms): FunASR's streaming chunk stride is
chunk_size[1] x 960."""


def token_list(speech: Path) -> list[str]:
    """<blank>, <s>, </s>, then words of the dev transcripts, `@@` pieces, letters, CJK, <unk>."""
    words: dict[str, None] = {}
    for line in (speech / "manifest.jsonl").read_text().splitlines():
        row = json.loads(line)
        for w in (row.get("text") or "").lower().split():
            w = "".join(c for c in w if c.isalpha() or c == "'")
            if 2 <= len(w) <= 7:
                words[w] = None
    pieces = [w[:3] + "@@" for w in list(words)[:40]]
    return (["<blank>", "<s>", "</s>", *list(words)[:60], *list(dict.fromkeys(pieces)), *list(LETTERS), *list(CJK), "<unk>"])


def load_clip(speech: Path, clip_id: str) -> np.ndarray:
    """float32 mono 16 kHz, decoded as tests/conftest.py does (soundfile, channel mean, soxr HQ)."""
    row = next(json.loads(x) for x in (speech / "manifest.jsonl").read_text().splitlines()
               if json.loads(x)["id"] == clip_id)
    data, rate = sf.read(str(speech / row["audio"]), dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def write_cmvn(path: Path, clips: list[np.ndarray], frontend_conf: dict[str, Any]) -> None:
    """Kaldi nnet1 `am.mvn` (<AddShift> = -mean, <Rescale> = 1/std of the LFR features), from
    FunASR's own front end without CMVN."""
    from funasr.frontends.wav_frontend import WavFrontend

    fe = WavFrontend(**frontend_conf)
    feats = []
    for audio in clips:
        x = torch.from_numpy(audio)[None]
        f, n = fe(x, torch.tensor([len(audio)]))
        feats.append(f[0, : int(n[0])])
    allf = torch.cat(feats).double()
    mean, std = allf.mean(0), allf.std(0).clamp_min(1e-3)
    dim = allf.shape[1]

    def row(v: torch.Tensor) -> str:
        return " ".join(f"{float(x):.6f}" for x in v)

    path.write_text(
        "<Nnet>\n"
        f"<Splice> {dim} {dim}\n[ 0 ]\n"
        f"<AddShift> {dim} {dim}\n<LearnRateCoef> 0 [ {row(-mean)} ]\n"
        f"<Rescale> {dim} {dim}\n<LearnRateCoef> 0 [ {row(1.0 / std)} ]\n"
        "</Nnet>\n"
    )


def build_checkpoint(out: Path, speech: Path, clips: list[np.ndarray], seaco: bool = False,
                     online: bool = False) -> None:  # fmt: skip
    import funasr.models.paraformer.model  # registers Paraformer and its parts
    from funasr.register import tables

    tokens = token_list(speech)
    cfg = config(len(tokens))
    if online:
        import funasr.models.paraformer_streaming.model  # registers ParaformerStreaming

        cfg["model"] = "ParaformerStreaming"
        cfg["encoder"], cfg["frontend"] = ONLINE["encoder"], ONLINE["frontend"]
        cfg["encoder_conf"].update(ONLINE["encoder_conf"])
        cfg["decoder_conf"].update(ONLINE["decoder_conf"])
    if seaco:
        cfg["model"] = "SeacoParaformer"
        cfg["model_conf"].update(SEACO["model_conf"])
        cfg.update({k: v for k, v in SEACO.items() if k != "model_conf"})
        import funasr.models.seaco_paraformer.model  # noqa: F401  (registers SeacoParaformer)
    out.mkdir(parents=True, exist_ok=True)
    if seaco:  # FunASR tokenizes hotwords through seg_dict when the model directory has one
        (out / "seg_dict").write_text("wizard wiz@@ ard\ncomplaint com@@ pla@@ int\nleft left\n")
    (out / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False, indent=0))
    (out / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False))
    write_cmvn(out / "am.mvn", clips, cfg["frontend_conf"])
    torch.manual_seed(SEED)
    model_class = tables.model_classes.get(cfg["model"])
    kwargs = {k: v for k, v in cfg.items() if k not in ("model", "model_conf", "frontend", "frontend_conf",
                                                        "tokenizer", "tokenizer_conf")}
    model = model_class(**kwargs, **cfg["model_conf"])
    with torch.no_grad():  # spread the random weights so tokens and CIF weights vary with the audio
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.add_(0.2 * torch.randn_like(p))
            elif "norm" in name and name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
        model.decoder.output_layer.weight.mul_(4.0)
        if seaco:  # the hotword head picks NO_BIAS (keep the plain decoder's token) about half the time
            model.hotword_output_layer.weight.mul_(4.0)
            model.hotword_output_layer.bias[SEACO["model_conf"]["NO_BIAS"]] += 7.0
    torch.save(model.state_dict(), out / "model.pt")
    logger.info("wrote %s (%d parameters, %d tokens)", out, sum(p.numel() for p in model.parameters()), len(tokens))


def record(out: Path, clips: dict[str, np.ndarray]) -> dict[str, Any]:
    from funasr import AutoModel

    am = AutoModel(model=str(out), device="cpu", disable_update=True, disable_pbar=True, log_level="ERROR")
    ids = list(clips)
    audios = [torch.from_numpy(clips[i].copy()) for i in ids]
    result: dict[str, Any] = {"funasr": _version(), "clips": {}, "batched": {}}
    for cid, audio in zip(ids, audios):
        (tok,), _ = am.model.inference([audio], key=[cid], tokenizer=None, frontend=am.kwargs["frontend"],
                                       device="cpu")
        (plain,) = am.generate(input=[audio.numpy()], key=[cid], batch_size=1)
        (stamped,) = am.generate(input=[audio.numpy()], key=[cid], batch_size=1, output_timestamp=True)
        result["clips"][cid] = {
            "samples": len(audio),
            "sha256": hashlib.sha256(np.ascontiguousarray(clips[cid]).tobytes()).hexdigest(),
            "token_ids": [int(t) for t in tok["token_int"]],
            "text": plain["text"],
            "timestamp_text": stamped["text"],
            "timestamps_ms": [[int(a), int(b)] for a, b in stamped["timestamp"]],
        }
    toks, _ = am.model.inference(audios, key=ids, tokenizer=None, frontend=am.kwargs["frontend"], device="cpu")
    result["batched"] = {"clips": ids, "token_ids": [[int(t) for t in r["token_int"]] for r in toks]}
    result["postprocess"] = record_postprocess()
    return result


POSTPROCESS_CASES = (
    ["he", "beg@@", "an", "a", "con@@", "fu@@", "sed"],
    ["u", "n", "y", "and", "a", "b", "the", "x", "y"],
    ["a", "b", "你", "好", "wor@@", "ld", "我", "c", "d", "e", "们"],
    ["i'm", "<unk>", "left", "9", "好", "x", "<s>", "y"],
    ["你", "好", "1", "2"],
    ["the", "rest@@"],
    ["a", "b", "c", "d", "e"],
    ["好", "a", "b", "c", "的"],
)
"""Token sequences for FunASR's `sentence_postprocess`: word pieces, abbreviations, CJK mixed
with words, specials, digits, a dangling piece."""


def record_postprocess() -> list[dict[str, Any]]:
    from funasr.utils.postprocess_utils import sentence_postprocess

    cases = []
    for tokens in POSTPROCESS_CASES:
        spans = [[100 * i, 100 * i + 80] for i in range(len(tokens))]
        text, _ = sentence_postprocess(list(tokens))
        ts_text, ts, words = sentence_postprocess(list(tokens), [list(s) for s in spans])
        cases.append({"tokens": list(tokens), "spans": spans, "text": text, "timestamp_text": ts_text,
                      "words": list(words), "word_spans": [[int(a), int(b)] for a, b in ts]})
    return cases


class _IdsSeen:
    """A FunASR tokenizer that remembers the token ids it was asked to spell."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.ids: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def ids2tokens(self, ids: Any) -> list[str]:
        self.ids.append([int(i) for i in ids])
        return list(self._tokenizer.ids2tokens(ids))


class _ClassSpelling:
    """A tokenizer class's own `ids2tokens` (unbound), while the class attribute is replaced."""

    def __init__(self, spell: Any) -> None:
        self.spell = spell
        self.instance: Any = None

    def ids2tokens(self, ids: Any) -> list[str]:
        return list(self.spell(self.instance, ids))


def record_seaco(out: Path, clips: dict[str, np.ndarray]) -> dict[str, Any]:
    """FunASR's SeacoParaformer with and without the hotword file, per clip (batch 1)."""
    from funasr import AutoModel

    am = AutoModel(model=str(out), device="cpu", disable_update=True, disable_pbar=True, log_level="ERROR")
    hotword_file = out.parent / "hotwords.txt"
    hotword_file.write_text("\n".join(HOTWORDS) + "\n")
    frontend = am.kwargs["frontend"]
    result: dict[str, Any] = {"hotwords": list(HOTWORDS), "clips": {}}
    for cid, audio in clips.items():
        x = torch.from_numpy(audio.copy())
        (plain,), _ = am.model.inference([x], key=[cid], tokenizer=None, frontend=frontend, device="cpu")
        seen = _IdsSeen(am.kwargs["tokenizer"])  # FunASR needs a tokenizer for hotwords; it then returns text
        (biased,), _ = am.model.inference([x], key=[cid], tokenizer=seen, frontend=frontend, device="cpu",
                                          hotword=str(hotword_file))
        result["clips"][cid] = {"token_ids": [int(t) for t in plain["token_int"]],
                                "hotword_token_ids": [int(t) for t in seen.ids[-1]],
                                "hotword_text": biased["text"]}
    result["hotword_ids"] = [list(map(int, h)) for h in am.model.hotword_list]
    hotword_file.unlink()
    return result


def record_online(out: Path, clips: dict[str, np.ndarray]) -> dict[str, Any]:
    """FunASR's streaming generate per clip and setting: the token ids of each 600 ms call."""
    from funasr import AutoModel

    am = AutoModel(model=str(out), device="cpu", disable_update=True, disable_pbar=True, log_level="ERROR")
    result: dict[str, Any] = {"settings": []}
    clips = {**clips, **{f"{cid}@{n}": clips[cid][:n] for cid, n in ONLINE_TRIMMED.items()}}
    for setting in ONLINE_SETTINGS:
        stride = setting["chunk_size"][1] * CHUNK_SAMPLES_PER_FRAME
        rows: dict[str, Any] = {}
        for cid, audio in clips.items():
            # generate deep-copies the model and its kwargs (the tokenizer too) on every call: record
            # on the tokenizer's class
            cls = type(am.kwargs["tokenizer"])
            seen = _IdsSeen(_ClassSpelling(cls.ids2tokens))
            def record(tok: Any, ids: Any, seen: _IdsSeen = seen) -> list[str]:
                seen._tokenizer.instance = tok
                return seen.ids2tokens(ids)

            cls.ids2tokens = record
            cache: dict[str, Any] = {}
            calls = max(-(-len(audio) // stride), 1)
            chunks, texts = [], []
            for i in range(calls):
                before = len(seen.ids)
                (res,) = am.generate(input=audio[i * stride : (i + 1) * stride], cache=cache,
                                     is_final=i == calls - 1, **setting)  # fmt: skip
                chunks.append([t for ids in seen.ids[before:] for t in ids])
                texts.append(res["text"])
            cls.ids2tokens = seen._tokenizer.spell
            rows[cid] = {"chunk_token_ids": chunks, "chunk_texts": texts}
        result["settings"].append({**setting, "clips": rows})
    return result


def write_bpe(out: Path, speech: Path, vocab_size: int) -> None:
    """A SentencePiece model of `vocab_size` pieces (ids 0-2: <blank>, <s>, </s>, as FunASR's token
    lists start) trained on the dev transcripts."""
    import io

    import sentencepiece as spm

    lines = [json.loads(x).get("text") or "" for x in (speech / "manifest.jsonl").read_text().splitlines()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([t.lower() for t in lines if t]), model_writer=model, vocab_size=vocab_size,
        model_type="bpe", character_coverage=1.0, normalization_rule_name="identity",
        unk_id=vocab_size - 1, bos_id=-1, eos_id=-1, pad_id=-1,
        control_symbols=["<blank>", "<s>", "</s>"], hard_vocab_limit=True, minloglevel=2,
    )  # fmt: skip
    (out / "bpe.model").write_bytes(model.getvalue())


def record_bpe(tiny: Path, bpe_model: Path, clips: dict[str, np.ndarray], work: Path) -> dict[str, Any]:
    """`tiny/`'s weights read with the SentencePiece model as the tokenizer: FunASR's text per clip."""
    import shutil

    import sentencepiece as spm
    from funasr import AutoModel

    sp = spm.SentencePieceProcessor(model_file=str(bpe_model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    ckpt = work / "bpe-ckpt"
    shutil.copytree(tiny, ckpt, dirs_exist_ok=True)
    (ckpt / "tokens.json").write_text(json.dumps(pieces, ensure_ascii=False))
    shutil.copy(bpe_model, ckpt / "bpe.model")
    cfg = yaml.safe_load((ckpt / "config.yaml").read_text())
    cfg["tokenizer"] = "SentencepiecesTokenizer"
    cfg["tokenizer_conf"] = {"bpemodel": "bpe.model", "unk_symbol": pieces[-1]}
    (ckpt / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False))
    am = AutoModel(model=str(ckpt), device="cpu", disable_update=True, disable_pbar=True, log_level="ERROR",
                   tokenizer_conf={"bpemodel": str(ckpt / "bpe.model"), "unk_symbol": pieces[-1]})  # fmt: skip
    rows = {}
    for cid, audio in clips.items():
        (res,) = am.generate(input=[audio], key=[cid], batch_size=1)
        rows[cid] = {"text": res["text"]}
    shutil.rmtree(ckpt)
    return {"pieces": len(pieces), "clips": rows}


def _version() -> str:
    import funasr

    return str(funasr.__version__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="fixture folder (gets tiny/ and reference.json)")
    parser.add_argument("--speech-data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "speech")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    torch.set_num_threads(1)
    clips = {cid: load_clip(args.speech_data, cid) for cid in CLIPS}
    ckpt = args.out / "tiny"
    build_checkpoint(ckpt, args.speech_data, list(clips.values()))
    reference = record(ckpt, clips)
    build_checkpoint(args.out / "seaco", args.speech_data, list(clips.values()), seaco=True)
    reference["seaco"] = record_seaco(args.out / "seaco", clips)
    build_checkpoint(args.out / "online", args.speech_data, list(clips.values()), online=True)
    reference["online"] = record_online(args.out / "online", clips)
    tokens = json.loads((ckpt / "tokens.json").read_text())
    write_bpe(args.out, args.speech_data, len(tokens))
    reference["bpe"] = record_bpe(ckpt, args.out / "bpe.model", clips, args.out)
    (args.out / "reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")
    for cid, r in reference["clips"].items():
        logger.info("%s: %d tokens: %s", cid, len(r["token_ids"]), r["text"])


if __name__ == "__main__":
    main()
