"""The seam between the engine core and a model family.

The core owns requests, admission (the scheduler) and output routing; a `ModelRunner`
owns the tensors: it takes admitted requests, advances all of them with batched
forwards in `execute()`, and reports outputs. The core never names a family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from engine.capabilities import Capabilities
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is and can do: the facts `/v1/models` shows and admission checks."""

    family: str
    """The family's name in the family table ('whisper', 'wenet', ...)."""
    model: str
    """Model name (e.g. 'tiny.en'); never a file-system path."""
    sample_rate: int
    """Hz the audio must arrive at."""
    languages: tuple[str, ...] = ()
    """ISO 639-1 codes the model transcribes; empty when the checkpoint does not say."""
    supports_streaming: bool = False
    """True when the runner advances live streams incrementally."""
    streaming_styles: tuple[str, ...] = ()
    """How it streams: 'sliding_window' (re-decoding), 'chunked' (cache-aware chunks over a KV
    pool), 'cache_aware' (trained look-aheads), 'buffered' (re-run a [left|chunk|right] window)."""
    decode_methods: tuple[str, ...] = ()
    """Decoders this checkpoint can run (EngineConfig.decode_method picks one)."""
    decode_method: str = ""
    """The decoder in use."""
    capabilities: Capabilities = field(default_factory=Capabilities)
    """The per-request options this model honours (enforced at admission)."""
    checkpoint_format: str = ""
    """On-disk format the weights were read from."""
    parameters: int = 0
    details: dict[str, object] = field(default_factory=dict)
    """Family facts for `/v1/models` (sizes, chunk geometry, look-aheads, presets); plain JSON values."""


@dataclass(frozen=True)
class RunnerStats:
    """Counters and gauges a runner reports after each step (0 where the family has no such thing).
    Counters (`*_total`) are absolute totals over the runner's life; the server replays their
    increase."""

    streams: int = 0
    """Live streams the runner holds state for."""
    streams_spoken: int | None = None
    """Of them, those that have shown their cost: a re-decoding family's stream costs little until
    its passes decode speech (Whisper: a pass has written text). None: every stream (a family
    whose streams cost the same from their first chunk)."""
    kv_blocks_used: int = 0
    kv_blocks_capacity: int = 0
    """Blocks in the paged KV pool (0: the family keeps no paged cache)."""
    kv_exhausted_total: int = 0
    """Streams that reached their KV ceiling (finished 'length' or had history recycled)."""
    kv_recycled_blocks_total: int = 0
    decode_slots_used: int = 0
    decode_slots_capacity: int = 0
    """Autoregressive decode rows in flight / the most allowed (0: no ceiling, one-shot decoding)."""
    # A re-decoding family's live passes (Whisper: each re-encodes its stream's window and decodes it)
    stream_passes_total: int = 0
    """Passes started over live streams' windows (finals included, and interim passes a final
    supersedes before they run)."""
    stream_encoded_seconds_total: float = 0.0
    """Audio those passes encoded, padding included (s). Over the live audio fed it is how often
    each second is encoded again; per pass it is what one pass costs the encoder."""
    stream_passes_shed_total: int = 0
    """Interim passes not run because the engine was behind their cadence (shed before a final is
    delayed)."""
    stream_passes_late_total: int = 0
    """Interim passes that waited three quarters of their pass period or more to be encoded: the engine is near
    its streams' cadence before it sheds a pass (engine/models/whisper/window.py `late`)."""
    stream_passes_skipped_total: int = 0
    """Interim passes not run because the VAD heard no speech since the last one and every word
    was committed."""
    # Speech coverage (Whisper: engine/models/whisper/coverage.py)
    speech_recovered_seconds_total: float = 0.0
    """Speech (s) the VAD heard that no decoded word covered, decoded once more (a window that
    ended early, or was judged silent)."""
    speech_uncovered_seconds_total: float = 0.0
    """Speech (s) still without words after that extra decode."""

    @property
    def kv_usage(self) -> float:
        """Fraction of the KV pool in use (0 when there is none)."""
        return self.kv_blocks_used / self.kv_blocks_capacity if self.kv_blocks_capacity else 0.0


class ModelRunner(Protocol):
    sample_rate: int
    """Rate (Hz) the model's audio must arrive at; other rates are rejected by the engine."""
    supports_streaming: bool
    """True when the runner advances live streams incrementally (service_mode='streaming')."""
    streams_stepped: int
    stream_chunk_samples: int
    """Audio (samples) one streaming step consumes: how much attached audio (`add_request(audio,
    streaming=True)`) the engine releases to a stream per step."""
    """Live streams whose model forward ran together in the last `execute()` (count; 0 when none)."""

    def info(self) -> ModelInfo:
        """What the loaded model is and can do."""
        ...

    def stats(self) -> RunnerStats:
        """Counters for metrics, read after each step."""
        ...

    def check_options(self, options: DecodingOptions, streaming: bool) -> None:
        """Raise InvalidRequestError / UnsupportedError for options this model cannot serve."""
        ...

    def free_slots(self) -> int:
        """How many more requests `admit` can take now (capacity of batch rows / KV blocks)."""
        ...

    def admit(self, requests: list[Request]) -> list[RequestOutput]:
        """Take ownership of newly scheduled requests (allocate their state). Returns outputs for
        requests that fail at admission (finished with error); the others are now running."""
        ...

    def has_work(self) -> bool:
        """Whether `execute` would make progress now (False while streams wait for audio)."""
        ...

    def execute(self) -> list[RequestOutput]:
        """Advance every admitted request by one batched step. Finished outputs mean the runner
        has already released that request's state."""
        ...

    def release(self, request: Request) -> None:
        """Free a request's state (abort). Idempotent."""
        ...

    def shutdown(self) -> None: ...


@runtime_checkable
class DurationCheck(Protocol):
    """A runner whose offline requests' options depend on their length (e.g. what a recording
    over the model's window can be served with); the engine asks it when a request is added."""

    def check_duration(self, seconds: float, options: DecodingOptions) -> None:
        """Raise InvalidRequestError / UnsupportedError for options `seconds` of audio cannot be served with."""
        ...
