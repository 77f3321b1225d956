"""Write a Whisper checkpoint as a whisper.cpp ggml model file (the layout of whisper.cpp's
own `models/convert-pt-to-ggml.py`), so `pywhispercpp` runs on our embedded weights offline.

    int32 magic "ggml" | 11 int32 hparams (n_vocab, n_audio_ctx, n_audio_state, n_audio_head,
    n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype)
    int32 n_mels, int32 n_fft, float32 mel filters [n_mels, n_fft]
    int32 n_tokens, then per token: int32 length + the token's bytes (BPE byte-level decoded)
    per tensor: int32 n_dims, int32 name length, int32 ftype (0 f32, 1 f16), int32 dims (reversed),
    name, data
Tensor names are openai/whisper's (our loader's layout); 1-D tensors, conv biases (stored
[n, 1]) and positional embeddings stay float32, other matrices are float16.
"""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import numpy as np

from benchmarks.asrbench.paths import data_root
from benchmarks.asrbench.peers.hf_whisper import _source_hash, embedded_model_dir

logger = logging.getLogger(__name__)

GGML_MAGIC = 0x67676D6C
F32_NAMES = ("encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding", "decoder.positional_embedding")


def convert(src: Path, dst: Path) -> Path:
    from engine.byte_bpe import piece_bytes
    from engine.log_mel import N_FFT, mel_filters
    from engine.models.whisper.loader import load_checkpoint

    ckpt = load_checkpoint(str(src))
    d = ckpt.dims
    vocab: dict[str, int] = json.loads(Path(ckpt.tokenizer_file).read_text())["model"]["vocab"]  # type: ignore[arg-type]
    tokens = [piece_bytes(tok) for tok, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    filters = mel_filters(d.n_mels).astype(np.float32)
    tmp = dst.with_name(dst.name + ".tmp")
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tmp.open("wb") as f:
        f.write(struct.pack("i", GGML_MAGIC))
        f.write(struct.pack("11i", d.n_vocab, d.n_audio_ctx, d.n_audio_state, d.n_audio_head, d.n_audio_layer,
                            d.n_text_ctx, d.n_text_state, d.n_text_head, d.n_text_layer, d.n_mels, 1))
        f.write(struct.pack("ii", *filters.shape))
        f.write(filters.tobytes())
        f.write(struct.pack("i", len(tokens)))
        for tok in tokens:
            f.write(struct.pack("i", len(tok)))
            f.write(tok)
        for name, tensor in ckpt.state_dict.items():
            data = tensor.float().numpy()
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                data = data.reshape(data.shape[0], 1)
            f16 = data.ndim >= 2 and name not in F32_NAMES
            data = data.astype(np.float16 if f16 else np.float32)
            raw = name.encode()
            f.write(struct.pack("iii", data.ndim, len(raw), 1 if f16 else 0))
            f.write(struct.pack(f"{data.ndim}i", *reversed(data.shape)))
            f.write(raw)
            f.write(np.ascontiguousarray(data).tobytes())
    tmp.replace(dst)
    logger.info("wrote %s (whisper.cpp ggml) from %s, filters %s, n_fft %d", dst, src, filters.shape, N_FFT)
    return dst


def ggml_model_file(src: str | None = None) -> Path:
    """A ggml file for `src` (default: the embedded tiny.en): `src` itself when it is a file."""
    if src and Path(src).is_file():
        return Path(src)
    source = Path(src or embedded_model_dir())
    dst = data_root() / "models" / f"ggml-whisper-{_source_hash(source)}.bin"
    if not dst.is_file():
        convert(source, dst)
    return dst
