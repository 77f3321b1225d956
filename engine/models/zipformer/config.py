"""The training arguments that shape an icefall Zipformer2 transducer, parsed and checked.

icefall's `train.py` (egs/librispeech/ASR/zipformer) builds the model from argparse values such as
`--encoder-dim 192,256,384,512,384,256`; per-stack values are comma strings (or one value for
every stack). `from_args` accepts those strings, ints or lists, refuses any argument it does not
know (naming it), and checks the combinations icefall asserts at build time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.errors import CheckpointError

FEATURE_DIM = 80
"""Mel bins icefall's librispeech recipes train on (`params.feature_dim`)."""
EMBED_CHANNELS = 128
"""Conv2dSubsampling's layer3_channels: fixed in icefall, not an argument."""
EMBED_CONTEXT = 7
"""Feature frames the subsampler's valid convolutions consume: 50 Hz frames = (T - 7) // 2."""
CONVNEXT_PAD = 3
"""Frames of left/right context of the subsampler's 7x7 ConvNeXt (its look-ahead when streaming)."""

PER_STACK = ("num_encoder_layers", "downsampling_factor", "feedforward_dim", "num_heads", "encoder_dim",
             "encoder_unmasked_dim", "query_head_dim", "value_head_dim", "pos_head_dim", "cnn_module_kernel")  # fmt: skip
SCALARS = ("pos_dim", "decoder_dim", "joiner_dim", "context_size", "vocab_size", "blank_id", "feature_dim")
FLAGS = ("causal", "use_transducer", "use_ctc", "use_attention_decoder")
LISTS = ("chunk_size", "left_context_frames")
IGNORED = ("attention_decoder_dim", "attention_decoder_num_layers", "attention_decoder_attention_dim",
           "attention_decoder_num_heads", "attention_decoder_feedforward_dim", "unk_id", "sos_id", "eos_id")
"""Arguments of heads this runtime does not run (accepted, not used)."""
KNOWN = frozenset(PER_STACK + SCALARS + FLAGS + LISTS + IGNORED)
DEFAULTS: dict[str, object] = {
    "pos_dim": 48, "query_head_dim": "32", "value_head_dim": "12", "pos_head_dim": "4",
    "decoder_dim": 512, "joiner_dim": 512, "context_size": 2, "blank_id": 0, "feature_dim": FEATURE_DIM,
    "causal": False, "chunk_size": "16,32,64,-1", "left_context_frames": "64,128,256,-1",
    "use_transducer": True, "use_ctc": False, "use_attention_decoder": False,
}  # fmt: skip
"""icefall train.py's defaults for the arguments a checkpoint may leave out."""
REQUIRED = ("num_encoder_layers", "downsampling_factor", "feedforward_dim", "num_heads", "encoder_dim",
            "encoder_unmasked_dim", "cnn_module_kernel", "vocab_size")  # fmt: skip


@dataclass(frozen=True)
class ZipformerConfig:
    num_encoder_layers: tuple[int, ...]
    downsampling_factor: tuple[int, ...]
    feedforward_dim: tuple[int, ...]
    num_heads: tuple[int, ...]
    encoder_dim: tuple[int, ...]
    encoder_unmasked_dim: tuple[int, ...]
    query_head_dim: tuple[int, ...]
    value_head_dim: tuple[int, ...]
    pos_head_dim: tuple[int, ...]
    cnn_module_kernel: tuple[int, ...]
    pos_dim: int
    decoder_dim: int
    joiner_dim: int
    context_size: int
    vocab_size: int
    blank_id: int
    feature_dim: int
    causal: bool
    chunk_size: tuple[int, ...]
    """Trained chunk sizes in frames at the 50 Hz embed rate (-1: full context)."""
    left_context_frames: tuple[int, ...]
    """Trained left contexts in 50 Hz frames (-1: unlimited)."""

    @property
    def num_stacks(self) -> int:
        return len(self.downsampling_factor)

    @property
    def output_dim(self) -> int:
        return max(self.encoder_dim)

    @property
    def streaming_chunks(self) -> tuple[int, ...]:
        return tuple(c for c in self.chunk_size if c > 0)

    @property
    def streaming_lefts(self) -> tuple[int, ...]:
        return tuple(lf for lf in self.left_context_frames if lf > 0)

    @classmethod
    def from_args(cls, raw: Mapping[str, object], where: str) -> ZipformerConfig:
        unknown = sorted(set(raw) - KNOWN)
        if unknown:
            raise CheckpointError(f"{where}: unknown Zipformer argument(s) {', '.join(unknown)} "
                                  f"(known: {', '.join(sorted(KNOWN))})")  # fmt: skip
        missing = [k for k in REQUIRED if k not in raw]
        if missing:
            raise CheckpointError(f"{where}: missing Zipformer argument(s) {', '.join(missing)}")
        args = {**DEFAULTS, **raw}
        if not _flag(args["use_transducer"], "use_transducer", where):
            raise CheckpointError(f"{where}: use_transducer is false: only the transducer head is served")
        stacks = len(_ints(args["downsampling_factor"], "downsampling_factor", where))
        per = {k: _per_stack(args[k], k, stacks, where) for k in PER_STACK}
        causal = _flag(args["causal"], "causal", where)
        chunk_size = _ints(args["chunk_size"], "chunk_size", where)
        left_context_frames = _ints(args["left_context_frames"], "left_context_frames", where)
        if not causal:
            # a `--causal 0` run still records the chunk arguments' defaults ("16,32,64,-1");
            # icefall's Zipformer2.get_chunk_info ignores them when not causal (full context)
            chunk_size, left_context_frames = (-1,), (-1,)
        cfg = cls(
            **per,
            **{k: int(str(args[k])) for k in SCALARS},
            causal=causal,
            chunk_size=chunk_size,
            left_context_frames=left_context_frames,
        )
        cfg._check(where)
        return cfg

    def _check(self, where: str) -> None:
        for i in range(self.num_stacks):
            if self.encoder_unmasked_dim[i] > self.encoder_dim[i]:
                raise CheckpointError(f"{where}: encoder_unmasked_dim[{i}] > encoder_dim[{i}]")
            if self.cnn_module_kernel[i] % 2 != 1:
                raise CheckpointError(f"{where}: cnn_module_kernel[{i}] must be odd")
        if self.feature_dim != FEATURE_DIM:
            raise CheckpointError(f"{where}: feature_dim {self.feature_dim} (this runtime computes {FEATURE_DIM} bins)")
        if self.context_size < 1:
            raise CheckpointError(f"{where}: context_size must be >= 1")


def _ints(value: object, name: str, where: str) -> tuple[int, ...]:
    try:
        if isinstance(value, str):
            return tuple(int(v) for v in value.split(","))
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
        if isinstance(value, (list, tuple)):
            return tuple(int(v) for v in value)
    except ValueError:
        pass
    raise CheckpointError(f"{where}: {name} must be an int or comma-separated ints, got {value!r}")


def _per_stack(value: object, name: str, stacks: int, where: str) -> tuple[int, ...]:
    vals = _ints(value, name, where)
    if len(vals) == 1:
        return vals * stacks
    if len(vals) != stacks:
        raise CheckpointError(f"{where}: {name} has {len(vals)} values for {stacks} encoder stacks")
    return vals


def _flag(value: object, name: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, str)) and str(value).lower() in ("1", "true", "0", "false"):
        return str(value).lower() in ("1", "true")
    raise CheckpointError(f"{where}: {name} must be a boolean, got {value!r}")
