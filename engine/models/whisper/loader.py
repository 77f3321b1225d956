"""Whisper checkpoint readers. Every format is mapped, in one place each, onto the
openai/whisper parameter layout that `model.Whisper` uses.

Formats, detected from the directory's files:
- OASR's own (`oasr.json` + `model.safetensors` + `tokenizer.json`): what `oasr convert` and
  `oasr quantize` write, already in this layout and float type (native.py).
- CTranslate2 (`model.bin` + `config.json` + `tokenizer.json`): faster-whisper's and the embedded model's.
- OpenAI `.pt` (`dims` + `model_state_dict`).
- Hugging Face Transformers (`config.json` with model_type whisper + `model.safetensors`).
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from engine.errors import CheckpointError
from engine.models.whisper import native
from engine.models.whisper.model import WhisperDims

logger = logging.getLogger(__name__)

# CTranslate2 dtype ids (see shared notes on the format)
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_CT2_BF16 = 5


@dataclass
class LoadedCheckpoint:
    dims: WhisperDims
    state_dict: dict[str, Tensor]
    tokenizer_file: str | None
    alignment_heads: list[tuple[int, int]] = field(default_factory=list)
    suppress_ids: list[int] | None = None
    suppress_ids_begin: list[int] | None = None
    lang_ids: list[int] | None = None
    format: str = ""
    quantization: native.NativeQuantization | None = None
    """Set when the weights were quantized ahead of time (`oasr quantize`): the state dict then
    holds `<layer>.weight_int8` / `.weight_scale` for the quantized linear layers."""


def detect_format(ckpt_dir: str, checkpoint_name: str | None = None) -> str | None:
    """The Whisper format `ckpt_dir` holds (None when it holds none). `checkpoint_name` names the
    weights file: 'model.bin' (CTranslate2), 'model.safetensors' (Hugging Face) or an OpenAI '.pt'."""
    names = set(os.listdir(ckpt_dir)) if os.path.isdir(ckpt_dir) else set()
    if native.MANIFEST in names and checkpoint_name in (None, native.WEIGHTS) and native.is_native(ckpt_dir):
        return "oasr"
    if checkpoint_name is not None:
        if checkpoint_name not in names:
            return None
        if checkpoint_name.endswith(".pt"):
            return "openai" if "train.yaml" not in names else None
        names = {n for n in names if n == checkpoint_name or not n.endswith((".bin", ".safetensors", ".pt"))}
    if "model.bin" in names and "config.json" in names:
        return "ctranslate2"
    if "model.safetensors" in names and "config.json" in names:
        with open(os.path.join(ckpt_dir, "config.json")) as f:
            if json.load(f).get("model_type") == "whisper":
                return "huggingface"
    if any(n.endswith(".pt") for n in names) and "train.yaml" not in names:  # train.yaml: a WeNet export
        pt = _single_pt(ckpt_dir)
        if pt is not None:
            return "openai"
    return None


def _single_pt(ckpt_dir: str) -> str | None:
    pts = sorted(n for n in os.listdir(ckpt_dir) if n.endswith(".pt"))
    return os.path.join(ckpt_dir, pts[0]) if len(pts) == 1 else None


def load_checkpoint(ckpt_dir: str, checkpoint_name: str | None = None) -> LoadedCheckpoint:
    fmt = detect_format(ckpt_dir, checkpoint_name)
    if fmt == "oasr":
        ckpt = _load_native(ckpt_dir)
    elif fmt == "ctranslate2":
        ckpt = _load_ctranslate2(ckpt_dir)
    elif fmt == "huggingface":
        ckpt = _load_huggingface(ckpt_dir)
    elif fmt == "openai":
        ckpt = _load_openai(os.path.join(ckpt_dir, checkpoint_name) if checkpoint_name else _single_pt(ckpt_dir))
    else:
        raise CheckpointError(f"{ckpt_dir!r} holds no Whisper checkpoint (CTranslate2, OpenAI .pt or HF safetensors)")
    ckpt.format = fmt
    if ckpt.tokenizer_file is None:
        raise CheckpointError(f"{ckpt_dir!r}: tokenizer.json is missing (needed to detokenize)")
    return ckpt


# ---------------- OASR (native.py) ----------------


def _load_native(ckpt_dir: str) -> LoadedCheckpoint:
    manifest, state_dict = native.read(ckpt_dir)
    try:
        dims = WhisperDims(**{k: int(v) for k, v in manifest["dims"].items()})
        return LoadedCheckpoint(
            dims=dims, state_dict=state_dict, tokenizer_file=_tokenizer_file(ckpt_dir),
            alignment_heads=[(int(a), int(b)) for a, b in manifest.get("alignment_heads", [])],
            suppress_ids=manifest.get("suppress_ids"), suppress_ids_begin=manifest.get("suppress_ids_begin"),
            lang_ids=manifest.get("lang_ids"), quantization=native.manifest_quantization(manifest))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{ckpt_dir}/{native.MANIFEST}: malformed ({exc!r})") from exc


# ---------------- CTranslate2 ----------------


@dataclass(frozen=True)
class Ct2Variable:
    name: str
    shape: tuple[int, ...]
    dtype_id: int
    offset: int
    """Where its bytes start in the file."""
    nbytes: int


def _parse_ct2(buf: Any, path: str) -> tuple[list[Ct2Variable], dict[str, str]]:
    """The variables (names, shapes, where their bytes are) and aliases of a CTranslate2 `model.bin`
    held in `buf` (bytes, or an mmap: only the headers are read)."""
    pos = 0

    def u32() -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        return int(v)

    def string() -> str:
        nonlocal pos
        (n,) = struct.unpack_from("<H", buf, pos)
        pos += 2
        s = bytes(buf[pos : pos + n - 1]).decode("utf-8")
        pos += n
        return s

    try:
        version = u32()
        if version < 5:
            raise CheckpointError(f"{path}: CTranslate2 binary version {version} is too old")
        spec = string()
        u32()  # spec revision
        if spec != "WhisperSpec":
            raise CheckpointError(f"{path}: spec {spec!r} is not a Whisper model")
        variables: list[Ct2Variable] = []
        for _ in range(u32()):
            name = string()
            (rank,) = struct.unpack_from("<B", buf, pos)
            pos += 1
            shape = struct.unpack_from(f"<{rank}I", buf, pos)
            pos += 4 * rank
            (dtype_id,) = struct.unpack_from("<B", buf, pos)
            pos += 1
            nbytes = u32()
            if pos + nbytes > len(buf):  # slicing would silently return fewer bytes
                raise CheckpointError(f"{path}: truncated CTranslate2 file (variable {name!r} needs {nbytes} "
                                      f"bytes, {len(buf) - pos} left)")
            variables.append(Ct2Variable(name, tuple(int(d) for d in shape), int(dtype_id), pos, nbytes))
            pos += nbytes
        aliases = {}
        for _ in range(u32()):
            alias = string()
            aliases[alias] = string()
    except struct.error as exc:
        raise CheckpointError(f"{path}: truncated CTranslate2 file ({exc})") from exc
    if pos != len(buf):
        raise CheckpointError(f"{path}: {len(buf) - pos} trailing bytes after the last variable")
    return variables, aliases


def read_ct2_variables(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Parse a CTranslate2 `model.bin` into raw arrays and aliases (consumes the file exactly)."""
    with open(path, "rb") as f:
        buf = f.read()
    entries, aliases = _parse_ct2(buf, path)
    variables: dict[str, np.ndarray] = {}
    for v in entries:
        raw = buf[v.offset : v.offset + v.nbytes]
        if v.dtype_id == _CT2_BF16:
            as_u16 = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = as_u16.view(np.float32)
        elif v.dtype_id in _CT2_DTYPES:
            arr = np.frombuffer(raw, dtype=_CT2_DTYPES[v.dtype_id])
        else:
            raise CheckpointError(f"{path}: variable {v.name!r} has unknown dtype id {v.dtype_id}")
        variables[v.name] = arr.reshape(v.shape) if v.shape else arr.reshape(())
    return variables, aliases


def read_ct2_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """Each variable's (and alias's) shape in a CTranslate2 `model.bin`, reading its headers only
    (the file is memory-mapped: the weights' pages are never touched)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        entries, aliases = _parse_ct2(buf, path)
    shapes = {v.name: v.shape for v in entries}
    shapes.update({alias: shapes[target] for alias, target in aliases.items() if target in shapes})
    return shapes


def _ct2_tensor(variables: dict[str, np.ndarray], name: str) -> Tensor:
    if name not in variables:
        raise CheckpointError(f"CTranslate2 model.bin lacks variable {name!r}")
    arr = variables[name]
    scale_name = name.rsplit("/", 1)[0] + "/weight_scale"
    if arr.dtype == np.int8 and scale_name in variables:  # int8 weights stored with per-row scales
        scale = variables[scale_name].astype(np.float32)
        return torch.from_numpy(arr.astype(np.float32) / scale.reshape(-1, *([1] * (arr.ndim - 1))))
    return torch.from_numpy(np.ascontiguousarray(arr).astype(np.float32))


def _load_ctranslate2(ckpt_dir: str) -> LoadedCheckpoint:
    variables, aliases = read_ct2_variables(os.path.join(ckpt_dir, "model.bin"))
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        config = json.load(f)

    def t(name: str) -> Tensor:
        return _ct2_tensor(variables, aliases.get(name, name))

    def count_layers(prefix: str) -> int:
        n = 0
        while f"{prefix}/layer_{n}/ffn/linear_0/weight" in variables:
            n += 1
        return n

    n_audio_state = int(variables["encoder/conv1/weight"].shape[0])
    n_text_state = int(variables["decoder/embeddings/weight"].shape[1])
    dims = WhisperDims(
        n_mels=int(variables["encoder/conv1/weight"].shape[1]),
        n_audio_ctx=int(variables["encoder/position_encodings/encodings"].shape[0]),
        n_audio_state=n_audio_state,
        n_audio_head=int(variables["encoder/num_heads"]) if "encoder/num_heads" in variables else n_audio_state // 64,
        n_audio_layer=count_layers("encoder"),
        n_vocab=int(variables["decoder/embeddings/weight"].shape[0]),
        n_text_ctx=int(variables["decoder/position_encodings/encodings"].shape[0]),
        n_text_state=n_text_state,
        n_text_head=int(variables["decoder/num_heads"]) if "decoder/num_heads" in variables else n_text_state // 64,
        n_text_layer=count_layers("decoder"),
    )
    sd: dict[str, Tensor] = {
        "encoder.conv1.weight": t("encoder/conv1/weight"),
        "encoder.conv1.bias": t("encoder/conv1/bias"),
        "encoder.conv2.weight": t("encoder/conv2/weight"),
        "encoder.conv2.bias": t("encoder/conv2/bias"),
        "encoder.positional_embedding": t("encoder/position_encodings/encodings"),
        "encoder.ln_post.weight": t("encoder/layer_norm/gamma"),
        "encoder.ln_post.bias": t("encoder/layer_norm/beta"),
        "decoder.token_embedding.weight": t("decoder/embeddings/weight"),
        "decoder.positional_embedding": t("decoder/position_encodings/encodings"),
        "decoder.ln.weight": t("decoder/layer_norm/gamma"),
        "decoder.ln.bias": t("decoder/layer_norm/beta"),
    }

    def fused_self_attention(src: str, dst: str, c: int) -> None:
        w, b = t(f"{src}/linear_0/weight"), t(f"{src}/linear_0/bias")
        sd[f"{dst}.query.weight"], sd[f"{dst}.key.weight"], sd[f"{dst}.value.weight"] = w[:c], w[c : 2 * c], w[2 * c :]
        sd[f"{dst}.query.bias"], sd[f"{dst}.value.bias"] = b[:c], b[2 * c :]  # key bias is zero in Whisper
        sd[f"{dst}.out.weight"], sd[f"{dst}.out.bias"] = t(f"{src}/linear_1/weight"), t(f"{src}/linear_1/bias")
        sd[f"{dst}_ln.weight"], sd[f"{dst}_ln.bias"] = t(f"{src}/layer_norm/gamma"), t(f"{src}/layer_norm/beta")

    def ffn(src: str, dst: str) -> None:
        sd[f"{dst}.mlp.0.weight"], sd[f"{dst}.mlp.0.bias"] = t(f"{src}/linear_0/weight"), t(f"{src}/linear_0/bias")
        sd[f"{dst}.mlp.2.weight"], sd[f"{dst}.mlp.2.bias"] = t(f"{src}/linear_1/weight"), t(f"{src}/linear_1/bias")
        sd[f"{dst}.mlp_ln.weight"], sd[f"{dst}.mlp_ln.bias"] = t(f"{src}/layer_norm/gamma"), t(f"{src}/layer_norm/beta")

    for i in range(dims.n_audio_layer):
        fused_self_attention(f"encoder/layer_{i}/self_attention", f"encoder.blocks.{i}.attn", n_audio_state)
        ffn(f"encoder/layer_{i}/ffn", f"encoder.blocks.{i}")
    c = n_text_state
    for i in range(dims.n_text_layer):
        src, dst = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        fused_self_attention(f"{src}/self_attention", f"{dst}.attn", c)
        ffn(f"{src}/ffn", dst)
        sd[f"{dst}.cross_attn.query.weight"] = t(f"{src}/attention/linear_0/weight")
        sd[f"{dst}.cross_attn.query.bias"] = t(f"{src}/attention/linear_0/bias")
        kv_w, kv_b = t(f"{src}/attention/linear_1/weight"), t(f"{src}/attention/linear_1/bias")
        sd[f"{dst}.cross_attn.key.weight"], sd[f"{dst}.cross_attn.value.weight"] = kv_w[:c], kv_w[c:]
        sd[f"{dst}.cross_attn.value.bias"] = kv_b[c:]
        sd[f"{dst}.cross_attn.out.weight"] = t(f"{src}/attention/linear_2/weight")
        sd[f"{dst}.cross_attn.out.bias"] = t(f"{src}/attention/linear_2/bias")
        sd[f"{dst}.cross_attn_ln.weight"] = t(f"{src}/attention/layer_norm/gamma")
        sd[f"{dst}.cross_attn_ln.bias"] = t(f"{src}/attention/layer_norm/beta")

    tok = os.path.join(ckpt_dir, "tokenizer.json")
    return LoadedCheckpoint(
        dims=dims,
        state_dict=sd,
        tokenizer_file=tok if os.path.exists(tok) else None,
        alignment_heads=[tuple(h) for h in config.get("alignment_heads", [])],  # type: ignore[misc]
        suppress_ids=config.get("suppress_ids"),
        suppress_ids_begin=config.get("suppress_ids_begin"),
        lang_ids=config.get("lang_ids"),
    )


# ---------------- OpenAI .pt ----------------


def _load_openai(path: str | None) -> LoadedCheckpoint:
    assert path is not None
    ckpt_dir = os.path.dirname(path)
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({exc})") from exc
    if not isinstance(blob, dict) or "dims" not in blob or "model_state_dict" not in blob:
        raise CheckpointError(f"{path}: expected an OpenAI Whisper checkpoint with 'dims' and 'model_state_dict'")
    dims = WhisperDims(**{k: int(v) for k, v in blob["dims"].items()})
    sd = {k: v.float() for k, v in blob["model_state_dict"].items()}
    heads: list[tuple[int, int]] = []
    if "alignment_heads" in blob:  # a dense (layers, heads) bool mask, as whisper stores it
        mask = blob["alignment_heads"]
        mask = mask.to_dense() if hasattr(mask, "to_dense") else torch.as_tensor(mask)
        heads = [(int(a), int(b)) for a, b in mask.nonzero().tolist()]
    extra = _sidecar_config(ckpt_dir)
    heads = heads or [tuple(h) for h in extra.get("alignment_heads", [])]  # type: ignore[misc]
    return LoadedCheckpoint(
        dims=dims,
        state_dict=sd,
        tokenizer_file=_tokenizer_file(ckpt_dir),
        alignment_heads=heads,
        suppress_ids=extra.get("suppress_ids"),
        suppress_ids_begin=extra.get("suppress_ids_begin"),
        lang_ids=extra.get("lang_ids"),
    )


def _tokenizer_file(ckpt_dir: str) -> str | None:
    path = os.path.join(ckpt_dir, "tokenizer.json")
    return path if os.path.exists(path) else None


def _sidecar_config(ckpt_dir: str) -> dict[str, Any]:
    path = os.path.join(ckpt_dir, "config.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        data: dict[str, Any] = json.load(f)
    return data


# ---------------- Hugging Face ----------------

_HF_ATTN = {"q_proj": "query", "k_proj": "key", "v_proj": "value", "out_proj": "out"}


def hf_to_openai_name(name: str) -> str | None:
    """Map one Transformers WhisperForConditionalGeneration parameter name onto openai's layout."""
    name = name.removeprefix("model.")
    if name == "proj_out.weight":
        return None  # tied to the token embedding
    parts = name.split(".")
    side = parts[0]  # encoder | decoder
    rest = parts[1:]
    simple = {
        "conv1.weight": "conv1.weight",
        "conv1.bias": "conv1.bias",
        "conv2.weight": "conv2.weight",
        "conv2.bias": "conv2.bias",
        "embed_positions.weight": "positional_embedding",
        "embed_tokens.weight": "token_embedding.weight",
        "layer_norm.weight": "ln_post.weight" if side == "encoder" else "ln.weight",
        "layer_norm.bias": "ln_post.bias" if side == "encoder" else "ln.bias",
    }
    joined = ".".join(rest)
    if joined in simple:
        return f"{side}.{simple[joined]}"
    if rest[0] != "layers":
        raise CheckpointError(f"unexpected Hugging Face Whisper parameter {name!r}")
    layer, module = rest[1], rest[2]
    tail = rest[3:]
    prefix = f"{side}.blocks.{layer}"
    if module in ("self_attn", "encoder_attn"):
        attn = "attn" if module == "self_attn" else "cross_attn"
        return f"{prefix}.{attn}.{_HF_ATTN[tail[0]]}.{tail[1]}"
    mapping = {
        "self_attn_layer_norm": "attn_ln",
        "encoder_attn_layer_norm": "cross_attn_ln",
        "final_layer_norm": "mlp_ln",
        "fc1": "mlp.0",
        "fc2": "mlp.2",
    }
    if module not in mapping:
        raise CheckpointError(f"unexpected Hugging Face Whisper parameter {name!r}")
    return f"{prefix}.{mapping[module]}.{tail[0]}"


def _load_huggingface(ckpt_dir: str) -> LoadedCheckpoint:
    from safetensors.torch import load_file

    with open(os.path.join(ckpt_dir, "config.json")) as f:
        cfg = json.load(f)
    try:
        dims = WhisperDims(
            n_mels=cfg["num_mel_bins"],
            n_audio_ctx=cfg["max_source_positions"],
            n_audio_state=cfg["d_model"],
            n_audio_head=cfg["encoder_attention_heads"],
            n_audio_layer=cfg["encoder_layers"],
            n_vocab=cfg["vocab_size"],
            n_text_ctx=cfg["max_target_positions"],
            n_text_state=cfg["d_model"],
            n_text_head=cfg["decoder_attention_heads"],
            n_text_layer=cfg["decoder_layers"],
        )
    except KeyError as exc:
        raise CheckpointError(f"{ckpt_dir}/config.json lacks {exc.args[0]!r}") from exc
    raw = load_file(os.path.join(ckpt_dir, "model.safetensors"))
    sd = {}
    for name, tensor in raw.items():
        mapped = hf_to_openai_name(name)
        if mapped is not None:
            sd[mapped] = tensor.float()
    gen_path = os.path.join(ckpt_dir, "generation_config.json")
    gen: dict[str, Any] = {}
    if os.path.exists(gen_path):
        with open(gen_path) as f:
            gen = json.load(f)
    heads = [tuple(h) for h in gen.get("alignment_heads", cfg.get("alignment_heads", []))]
    suppress = gen.get("suppress_tokens", cfg.get("suppress_tokens"))
    begin = gen.get("begin_suppress_tokens", cfg.get("begin_suppress_tokens"))
    return LoadedCheckpoint(
        dims=dims,
        state_dict=sd,
        tokenizer_file=_tokenizer_file(ckpt_dir),
        alignment_heads=heads,  # type: ignore[arg-type]
        suppress_ids=suppress,
        suppress_ids_begin=begin,
        lang_ids=gen.get("lang_ids"),
    )
