"""Per-request state, owned by the engine thread."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import numpy as np

from engine.types import DecodingOptions, FinishReason, RequestOutput


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """One recognition request. Offline requests carry all their audio; streaming ones
    accumulate it through `append_audio` until `input_finished`."""

    request_id: str
    streaming: bool
    decoding: DecodingOptions
    sample_rate: int
    priority: int = 0
    audio: np.ndarray | None = None
    """Offline: the whole waveform (float32 mono at the model rate)."""
    arrival_time: float = field(default_factory=time.monotonic)
    status: RequestStatus = RequestStatus.WAITING
    pending_audio: list[np.ndarray] = field(default_factory=list)
    """Streaming: chunks fed since the runner last took audio."""
    pending_samples: int = 0
    received_samples: int = 0
    """Streaming: total samples fed so far."""
    input_finished: bool = False
    """Streaming: the client said no more audio will come."""
    attached_audio: np.ndarray | None = None
    """Streaming with all audio attached up-front (`add_request(audio, streaming=True)`): what the
    engine has not yet released to the stream. It releases one stream chunk per step, as if the
    audio arrived live, and ends the input when nothing is left."""
    runner_state: object = None
    """Opaque per-request state owned by the model runner."""
    first_scheduled_time: float | None = None

    @property
    def num_samples(self) -> int:
        """Samples known so far: the whole audio offline, the received audio when streaming."""
        if self.audio is not None:
            return int(self.audio.shape[0])
        attached = 0 if self.attached_audio is None else int(self.attached_audio.shape[0])
        return self.received_samples + attached

    @property
    def duration(self) -> float:
        return self.num_samples / self.sample_rate

    def append_audio(self, chunk: np.ndarray) -> None:
        if chunk.size:
            self.pending_audio.append(chunk)
            self.pending_samples += int(chunk.shape[0])
            self.received_samples += int(chunk.shape[0])

    def release_attached(self, samples: int) -> None:
        """Move up to `samples` of the attached audio into the stream's input; the last release ends it."""
        if self.attached_audio is None:
            return
        chunk, rest = self.attached_audio[:samples], self.attached_audio[samples:]
        self.append_audio(chunk)
        self.attached_audio = rest if rest.size else None
        if self.attached_audio is None:
            self.input_finished = True

    def take_pending_audio(self) -> np.ndarray:
        """All audio fed since the last take, as one array (empty when none)."""
        if not self.pending_audio:
            return np.zeros(0, dtype=np.float32)
        out = self.pending_audio[0] if len(self.pending_audio) == 1 else np.concatenate(self.pending_audio)
        self.pending_audio = []
        self.pending_samples = 0
        return out


@dataclass
class FinishedInfo:
    request_id: str
    reason: FinishReason


def error_output(request: Request, stage: str, error: str | BaseException) -> RequestOutput:
    """The one terminal error output of a request, whoever fails it (a family's runner at a stage,
    or the engine after a failed step): the exception's type and message when given one."""
    message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return RequestOutput(request_id=request.request_id, finished=True, finish_reason="error", error=message,
                         error_stage=stage, duration=request.duration)
