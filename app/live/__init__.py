"""The live-session core: every streaming surface (`/v1/realtime`, gRPC StreamingRecognize) is a
thin adapter over it. A surface decodes its wire format to model-rate samples, picks manual
turns or server VAD, and renders the typed events it gets back; nothing here knows a wire format.

    session.py  LiveSession: the session clock, turn detection, one engine request per turn and
                the pump that turns its outputs into events (through app/engine_service.py only)
    turn.py     Turn and the events: SpeechBegan, TurnOpened, TurnRefused, SpeechEnded,
                InputClosed, TurnPartial, TurnFinal, TurnFailed, TurnAborted
    vad.py      VadModelCache (one VAD model per server; a failed load is remembered, never
                fatal) and VadBatcher (all sessions' audio scored in shared batched calls)

A surface in four calls:

    vad = await VadModelCache.of(app.state).batcher()          # None: no server VAD
    live = LiveSession(service, on_event, options=DecodingOptions(...), vad=vad,
                       turn_detection=TurnSettings(...) or None)
    await live.push(samples)        # float32 mono at service.sample_rate, any chunking
    await live.end_turn(tail)       # a commit / half-close: the turn in progress ends
    live.abort_all()                # in the surface's `finally`
"""

from __future__ import annotations

from app.live.session import EventHandler, LiveSession
from app.live.turn import (
    InputClosed,
    LiveEvent,
    Outcome,
    SpeechBegan,
    SpeechEnded,
    Turn,
    TurnAborted,
    TurnFailed,
    TurnFinal,
    TurnOpened,
    TurnPartial,
    TurnRefused,
    elapsed_ms,
    samples_ms,
)
from app.live.vad import VadBatcher, VadModelCache

__all__ = [
    "EventHandler",
    "InputClosed",
    "LiveEvent",
    "LiveSession",
    "Outcome",
    "SpeechBegan",
    "SpeechEnded",
    "Turn",
    "TurnAborted",
    "TurnFailed",
    "TurnFinal",
    "TurnOpened",
    "TurnPartial",
    "TurnRefused",
    "VadBatcher",
    "VadModelCache",
    "elapsed_ms",
    "samples_ms",
]
