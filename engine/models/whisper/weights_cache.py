"""Converted CTranslate2 weights kept in the user cache: a restart reads them instead of
converting `model.bin` again.

Reading a CTranslate2 checkpoint means parsing it and widening every float16 tensor to float32
(0.85-1.4 s for the embedded tiny.en on a loaded 2-core VM, mostly numpy's astype); the same
weights as float32 safetensors load in 0.02-0.03 s (memory-mapped). The first load writes the
converted state dict and the checkpoint's facts (dims, alignment heads, token tables) there;
later loads of the same file use it. An entry is keyed by the checkpoint's real path, size and
modification time, and by the source of the reader (loader.py) that produced it, so an edited
checkpoint or a changed mapping is converted afresh. Writing is best effort (a read-only or full
cache only costs the conversion); entries are written whole or not at all.

Location: `$OASR_CACHE_DIR/whisper-weights`, else the user cache dir (~/.cache/oasr on Linux).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

from engine.models.whisper.loader import LoadedCheckpoint
from engine.models.whisper.model import WhisperDims

logger = logging.getLogger(__name__)

CACHE_ENV = "OASR_CACHE_DIR"
TRANSPOSED_EMBEDDING = "decoder.output_weight_kn"
"""The tied embedding transposed, as the CPU logits read it (TextDecoder.keep_output_weight_transposed):
stored beside the weights so a start memory-maps it instead of transposing 80 MB (0.12 s for tiny.en)."""
SOURCES = ("model.bin", "config.json")
"""The checkpoint files an entry is derived from."""


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]) / "whisper-weights"
    import platformdirs

    return Path(platformdirs.user_cache_dir("oasr")) / "whisper-weights"


def entry_key(ckpt_dir: str) -> str:
    """Names the checkpoint's files (real path, size, mtime) and the reader's source."""
    digest = hashlib.sha256()
    for name in SOURCES:
        path = os.path.realpath(os.path.join(ckpt_dir, name))
        if os.path.exists(path):
            st = os.stat(path)
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    loader = Path(__file__).with_name("loader.py")
    digest.update(loader.read_bytes())
    return digest.hexdigest()[:32]


def load(ckpt_dir: str) -> LoadedCheckpoint | None:
    """The cached conversion of `ckpt_dir`'s CTranslate2 checkpoint, or None."""
    path = cache_root() / f"{entry_key(ckpt_dir)}.safetensors"
    if not path.is_file():
        return None
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), framework="pt") as f:
            facts = json.loads(f.metadata()["facts"])
        state_dict = load_file(str(path))
    except Exception as exc:  # a damaged entry: convert again (and overwrite it)
        logger.warning("ignoring the cached weights %s: %s", path, exc)
        return None
    tok = os.path.join(ckpt_dir, "tokenizer.json")
    logger.info("whisper weights of %s read from the cache (%s)", ckpt_dir, path)
    return LoadedCheckpoint(
        dims=WhisperDims(**facts["dims"]), state_dict=state_dict,
        tokenizer_file=tok if os.path.exists(tok) else None,
        alignment_heads=[(int(a), int(b)) for a, b in facts["alignment_heads"]],
        suppress_ids=facts["suppress_ids"], suppress_ids_begin=facts["suppress_ids_begin"],
        lang_ids=facts["lang_ids"])


def store(ckpt_dir: str, ckpt: LoadedCheckpoint) -> LoadedCheckpoint:
    """Write `ckpt` (converted from `ckpt_dir`) to the cache, best effort; returns it."""
    from safetensors.torch import save_file

    root = cache_root()
    facts = {"dims": dataclasses.asdict(ckpt.dims), "alignment_heads": ckpt.alignment_heads,
             "suppress_ids": ckpt.suppress_ids, "suppress_ids_begin": ckpt.suppress_ids_begin,
             "lang_ids": ckpt.lang_ids}
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
        os.close(fd)
        try:
            # clones: the reader's split projections are views of one tensor, which safetensors refuses
            tensors = {k: v.detach().clone() for k, v in ckpt.state_dict.items()}
            embedding = ckpt.state_dict.get("decoder.token_embedding.weight")
            if embedding is not None:
                tensors[TRANSPOSED_EMBEDDING] = embedding.detach().t().contiguous()
            save_file(tensors, tmp,
                      metadata={"facts": json.dumps(facts), "source": os.path.realpath(ckpt_dir)})
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from a server running as another user
            os.replace(tmp, root / f"{entry_key(ckpt_dir)}.safetensors")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:
        logger.info("converted weights not cached (%s): the next start converts again", exc)
    return ckpt


__all__ = ["CACHE_ENV", "TRANSPOSED_EMBEDDING", "cache_root", "entry_key", "load", "store"]
