"""A window job (one window of audio to decode at one temperature), its result, and what a job's
owner (an offline transcription or a live stream) promises the runner.

This module is the bottom of the family's import graph: the decoder batch, the planner and the
owners all speak in these types, and it imports none of them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from engine.models.whisper.features import ENCODER_STRIDE, SAMPLE_RATE
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput

LATE_PASS_SHARE = 0.75
"""Share of its pass period an interim pass may wait to be encoded before it counts as late
(`WindowJob.late`): three quarters of a period is when a pass still starts before its stream's
next one is due, with a quarter period to spare. At half a period (until 2026-12-06) a 16-session
burst on the 2-core Xeon started 45-99 passes late while shedding 0-55, and the late-pass hold
(app/admission.py) refused the 16th session in four runs of seven (gap 0.75-0.93 s); at three
quarters 16 of 16 were admitted in four runs of five (gap 0.80-0.98 s; the fifth's 16th was
refused on the share projection), 24 offered 17, 48 offered 15 and 16
(benchmarks/streaming_capacity.py --server)."""

if TYPE_CHECKING:
    from engine.models.whisper.tokenizer import WhisperTokenizer


@dataclass
class WindowResult:
    tokens: list[int]
    """Sampled tokens without the trailing end-of-text."""
    sum_logprob: float
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    nbest: list[tuple[list[int], float]] = field(default_factory=list)
    """(tokens, length-normalized logprob) best first, beam search only."""
    token_logprobs: list[float] = field(default_factory=list)
    """Log-probability of each of `tokens` under the ruled distribution it was chosen from."""


def attach_logprobs(out: RequestOutput, tokenizer: WhisperTokenizer, tokens: list[int], logprobs: list[float]) -> None:
    """Give an output its tokens with their log-probabilities and exact bytes (`logprobs`)."""
    out.tokens = tokens
    out.token_logprobs = [round(lp, 6) for lp in logprobs]
    out.token_bytes = [tokenizer.token_bytes(t) for t in tokens]


def decode_rows(options: DecodingOptions, temperature: float) -> int:
    """Decoder rows of a window at `temperature`: the beams of a beam search (one: greedy), or
    the candidates of a sampled window."""
    return options.beam_size if temperature == 0.0 else options.best_of


class WindowOwner(Protocol):
    """A request's transcription state, as the runner drives it window by window."""

    request: Request
    options: DecodingOptions
    generator: torch.Generator | None

    def token_budget(self, frames: int) -> int | None:
        """Most new tokens for a window of `frames` mel frames (None: the model's limit)."""
        ...

    def needs_language(self) -> bool: ...

    def set_language(self, code: str) -> None: ...

    def build_prefix(self) -> tuple[list[int], int]:
        """The decoder prompt of the next window and the index of its start-of-transcript token."""
        ...

    def on_window_done(self, job: WindowJob, result: WindowResult) -> WindowUpdate:
        """Take a decoded window: what to run next, what to emit, what is no longer needed."""
        ...


FailRequest = Callable[[WindowOwner, str, Exception], None]
"""Fails the request of a job's owner at a stage ('encode', 'decode', 'features', ...): the runner
releases the request and reports the error."""


@dataclass
class WindowUpdate:
    """An owner's answer to a decoded window."""

    jobs: list[WindowJob] = field(default_factory=list)
    """To run next (several at once: a window's temperature fallbacks decode side by side)."""
    output: RequestOutput | None = None
    withdrawn: list[WindowJob] = field(default_factory=list)
    """Jobs queued or decoding whose result is no longer needed (a lower fallback temperature
    passed): the runner drops them."""


@dataclass(eq=False)
class WindowJob:
    owner: WindowOwner
    mel: Tensor  # (n_mels, frames to encode)
    seek: int  # first mel frame of the window
    frames: int  # real (unpadded) mel frames in the window
    temperature: float
    ladder_index: int
    prefix: list[int] = field(default_factory=list)
    sot_index: int = 0
    audio_features: Tensor | None = None  # (S, C) once encoded
    cross_kv: tuple[list[Tensor], list[Tensor]] | None = None
    """The window's decoder cross K/V per layer (1, H, own positions, Dh): projected beside the
    decoder once encoded (encoder_thread.py, where exact) or at its prefill; its prefill and its
    word-alignment pass read them instead of projecting them again."""
    live: bool = False  # a pass of a live stream (interim or final)
    final: bool = False  # a live stream's last pass
    forced: list[int] = field(default_factory=list)
    """Text tokens ending the prefix, decoded as if sampled (without timestamps): what a live
    stream's earlier passes heard, so its final pass decodes only what follows."""
    draft: list[int] = field(default_factory=list)
    """Tokens a live pass expects to decode after its prefix (what the stream's last pass decoded
    there, end-of-text last): the prefill reads them too, and the greedy choice at each of their
    positions accepts them up to the first it does not choose (DecodeGroup.accept_draft)."""
    generator: torch.Generator | None = None
    """This job's own sampling generator (fallback attempts); None uses the owner's."""
    speech_until: float | None = None
    """Seconds from the window's start to where the VAD hears its speech end (a long recording's
    window, cut at silences: speech runs to its end); None: not known. The decoder does not end
    the window's text while that much speech is left after its last timestamp (decoding.py
    `eot_floor`)."""
    patience_samples: float = math.inf
    """An interim live pass still waiting to be encoded after its stream has received this much
    more audio (its pass period) means the engine is behind its streams' cadence
    (WindowPlanner.interims_overdue). Counted in the stream's own audio, not wall time: a caller
    that feeds audio faster than real time and steps until done, or a loaded machine, gets the
    same passes; a server is behind exactly when its clients' audio outruns its passes."""
    stream_request: Request | None = None
    """A live pass's request, whose received audio is the clock `patience_samples` counts in."""
    received_when_queued: int = 0  # the stream's received samples when the planner took the pass
    queued_at: float = 0.0  # time.monotonic() when the planner took it (offline windows' patience)
    held_for_final: bool = False
    """An interim pass the planner held back while a final pass went first: its wait is the
    planner's choice, not the engine's load, so it is never `late` (a final is the one pass a
    client waits on; an engine that cannot keep up with finals and interims sheds passes)."""

    def late(self, now: float) -> bool:
        """An interim pass taken for encoding after waiting LATE_PASS_SHARE of its pass period
        (wall time): the engine nears its streams' cadence, before any pass is overdue. Wall time,
        unlike `overdue`: it tells admission how close the engine runs to its deadlines, which a
        client's chunk size must not sway (one 1 s chunk brings two 0.5 s periods at once)."""
        if not self.interim or self.stream_request is None or math.isinf(self.patience_samples) or self.held_for_final:
            return False
        return now - self.queued_at >= LATE_PASS_SHARE * self.patience_samples / SAMPLE_RATE

    def overdue(self) -> bool:
        """An interim pass whose stream received a pass period of audio while it waited."""
        if not self.interim or self.stream_request is None:
            return False
        return self.stream_request.received_samples - self.received_when_queued >= self.patience_samples

    @property
    def audio_positions(self) -> int:
        """Encoder positions of this window's own audio; past them its context is encoded silence."""
        return int(self.mel.shape[1]) // ENCODER_STRIDE

    @property
    def rows(self) -> int:
        return decode_rows(self.owner.options, self.temperature)

    @property
    def interim(self) -> bool:
        """A live pass whose result nobody waits on (a partial)."""
        return self.live and not self.final

    @property
    def request_id(self) -> str:
        return self.owner.request.request_id

    def refresh_prefix(self) -> None:
        self.prefix, self.sot_index = self.owner.build_prefix()
