"""The seam between the engine core and a model family.

The core owns requests, admission (the scheduler) and output routing; a `ModelRunner`
owns the tensors: it takes admitted requests, advances all of them with batched
forwards in `execute()`, and reports outputs. The core never names a family.
"""

from __future__ import annotations

from typing import Any, Protocol

from engine.request import Request
from engine.types import DecodingOptions, RequestOutput


class ModelRunner(Protocol):
    sample_rate: int
    """Rate (Hz) the model's audio must arrive at; other rates are rejected by the engine."""
    supports_streaming: bool
    """True when the runner advances live streams incrementally (service_mode='streaming')."""
    streams_stepped: int
    """Live streams whose model forward ran together in the last `execute()` (count; 0 when none)."""

    def info(self) -> dict[str, Any]:
        """Facts for `/v1/models`: family, checkpoint, sizes, languages, capabilities."""
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
