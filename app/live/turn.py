"""A live turn (one engine streaming request) and the typed events a live session hands its surface.

Times are on the session clock: model-rate samples since the session's first audio (`Turn.start`,
`Turn.fed`) or milliseconds of that audio (`SpeechBegan`, `SpeechEnded`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Literal

from app.output_stream import OutputStream
from engine import RequestOutput
from engine.errors import EngineError

Outcome = Literal["ok", "error", "shutdown", "cancelled"]


@dataclass(eq=False)
class Turn:
    """One utterance: an engine streaming request fed with the turn's audio."""

    id: str
    """The surface's name for the turn (a realtime `item_…`), from the session's `new_turn_id`."""
    stream: OutputStream
    start: int
    """Session clock (model-rate samples) at the turn's first sample."""
    opened_at: float = field(default_factory=time.monotonic)
    fed: int = 0
    """Samples handed to the engine so far."""
    arrivals: list[tuple[int, float]] = field(default_factory=list)
    """(fed samples after a chunk, monotonic time it was fed), to date the audio a partial covers."""
    input_closed_at: float | None = None
    """When the turn's input was ended (its `InputClosed` is on its way or handled)."""
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the surface has handled the turn's `InputClosed` (e.g. sent its `committed` event)."""
    text: str = ""
    """Text of the last partial handed out."""
    partials: int = 0
    """Partials handed out so far."""
    finished: bool = False
    """The engine's last output for the turn has been read (later audio is not fed)."""
    outcome: Outcome = "cancelled"
    """How the engine ended the turn; stays 'cancelled' when it was aborted or its pump cancelled."""
    pump: asyncio.Task[None] | None = None
    _cursor: int = 0

    @property
    def request_id(self) -> str:
        return self.stream.request_id

    def fed_at(self, samples: int) -> float:
        """When the turn's audio up to `samples` had been fed (covered audio only grows, so a
        cursor makes each lookup O(1) amortized)."""
        while self._cursor < len(self.arrivals) - 1 and self.arrivals[self._cursor][0] < samples:
            self._cursor += 1
        return self.arrivals[self._cursor][1] if self.arrivals else self.opened_at

    def covered(self, out: RequestOutput, rate: int) -> int:
        """Samples of the turn's audio an output covers (its duration, at most what was fed)."""
        return min(round(out.duration * rate), self.fed) if out.duration else self.fed


# ---- Events, in the order a session hands them to its surface ----


@dataclass(frozen=True)
class SpeechBegan:
    """Server VAD: speech started; the turn `turn_id` opens next (`TurnOpened` or `TurnRefused`)."""

    turn_id: str
    audio_start_ms: int
    """Start of the turn's audio (the speech start minus prefix padding)."""
    speech_start_ms: int


@dataclass(frozen=True)
class TurnOpened:
    """A turn's engine request is open; its audio and outputs follow."""

    turn: Turn


@dataclass(frozen=True)
class TurnRefused:
    """Server VAD: the engine refused the request of the turn that just began (shutdown, options).
    With manual turns the refusal is raised by `LiveSession.push` instead."""

    turn_id: str
    error: EngineError


@dataclass(frozen=True)
class SpeechEnded:
    """Server VAD: the speech of turn `turn_id` ended; its `InputClosed` follows if it is open."""

    turn_id: str
    audio_end_ms: int
    """End of the turn's audio (the speech end plus suffix padding)."""
    speech_end_ms: int


@dataclass(frozen=True)
class InputClosed:
    """The turn's input ended (server VAD or the surface's `end_turn`): its final result follows."""

    turn: Turn


@dataclass(frozen=True)
class TurnPartial:
    """New interim text of a turn (outputs whose text did not change are not handed out)."""

    turn: Turn
    output: RequestOutput
    previous_text: str
    """Text of the turn's previous partial ("" for the first)."""


@dataclass(frozen=True)
class TurnFinal:
    """The turn's result (finish_reason 'stop' or 'length'). The engine may end a turn before its
    input is closed (a cache ceiling); a surface that must announce the close first awaits
    `turn.closed`."""

    turn: Turn
    output: RequestOutput


@dataclass(frozen=True)
class TurnFailed:
    """The engine failed the turn (finish_reason 'error'); later audio starts a new turn."""

    turn: Turn
    output: RequestOutput

    @property
    def shutdown(self) -> bool:
        """Failed because the server is shutting down (not the audio's fault)."""
        return self.output.error_stage == "shutdown"


@dataclass(frozen=True)
class TurnAborted:
    """The engine request was aborted from outside the session (an abort the session made itself
    cancels the turn's pump first, so it is never handed out)."""

    turn: Turn
    output: RequestOutput


LiveEvent = (
    SpeechBegan | TurnOpened | TurnRefused | SpeechEnded | InputClosed | TurnPartial | TurnFinal | TurnFailed
    | TurnAborted
)


def samples_ms(samples: int, rate: int) -> int:
    return samples * 1000 // rate


def elapsed_ms(since: float) -> int:
    return max(0, round((time.monotonic() - since) * 1000))
