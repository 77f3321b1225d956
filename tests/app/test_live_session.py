"""The live-session core (app/live) without a surface: turns on the real engine service with the
embedded model (manual turns and server-VAD turns with the packaged Silero model), and the
pump's contract over the scripted bridge (partials deduplicated, a failed turn detached, a
refused turn announced, aborts counted, TurnOpened handled before any of the turn's outputs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from app.engine_service import EngineService
from app.live import (
    InputClosed,
    LiveEvent,
    LiveSession,
    SpeechBegan,
    SpeechEnded,
    Turn,
    TurnAborted,
    TurnFailed,
    TurnFinal,
    TurnOpened,
    TurnPartial,
    TurnRefused,
    VadBatcher,
)
from app.metrics import Metrics
from engine import DecodingOptions, RequestOutput
from engine.errors import EngineShutdownError
from engine.vad import TurnSettings, load_vad_model
from tests.app.bridge_double import ScriptedService
from tests.conftest import load_clip

RATE = 16000
OPTIONS = DecodingOptions(task="transcribe", language="en")
FIRST, SECOND = "ps_goforward", "mfa_thoughts"
REFERENCE = {FIRST: "go forward ten meters", SECOND: "i have a thousand thoughts about that thing"}


class Recorder:
    """The surface: records every event in the order it was handed out."""

    def __init__(self) -> None:
        self.events: list[LiveEvent] = []
        self.done: list[Turn] = []

    async def __call__(self, event: LiveEvent) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def names(self) -> list[str]:
        return [type(e).__name__ for e in self.events]


def wer(reference: str, hypothesis: str) -> float:
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    return float(jiwer.wer(norm(reference), norm(hypothesis)))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def check_turn_order(rec: Recorder) -> None:
    """Per turn: TurnOpened first, partials with changing text chained by previous_text,
    InputClosed before the one terminal event, nothing after it."""
    by_turn: dict[Turn, list[LiveEvent]] = {}
    for event in rec.events:
        turn = getattr(event, "turn", None)
        if turn is not None:
            by_turn.setdefault(turn, []).append(event)
    for events in by_turn.values():
        assert isinstance(events[0], TurnOpened), events
        assert isinstance(events[-1], TurnFinal), events
        assert sum(isinstance(e, InputClosed) for e in events) == 1
        assert [type(e) for e in events].index(InputClosed) < len(events) - 1
        partials = [e for e in events if isinstance(e, TurnPartial)]
        previous = ""
        for p in partials:
            assert p.previous_text == previous != p.output.text
            previous = p.output.text


# ---------------------------------------------------------------- the real engine service


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def service() -> AsyncIterator[EngineService]:
    from engine import ASREngine, EngineConfig

    svc = EngineService(ASREngine(EngineConfig(quantization="none", service_mode="streaming", max_batch_size=2)), Metrics())
    svc.start()
    await svc.wait_started()
    yield svc
    await asyncio.to_thread(svc.stop)


@pytest.mark.asyncio(loop_scope="module")
async def test_manual_turns_on_the_real_engine(service: EngineService, clips: Any) -> None:
    rec = Recorder()
    live = LiveSession(service, rec, options=OPTIONS, on_turn_done=rec.done.append)
    audio = {c: load_clip(c) for c in (FIRST, SECOND)}
    for clip in (FIRST, SECOND):
        for i in range(0, audio[clip].size, 1600):  # 100 ms chunks
            await live.push(audio[clip][i : i + 1600])
        assert await live.end_turn()
    await live.wait_done()
    check_turn_order(rec)
    one, two = (e.turn for e in rec.of(TurnOpened))
    assert (one.start, one.fed) == (0, audio[FIRST].size)
    assert (two.start, two.fed) == (audio[FIRST].size, audio[SECOND].size)
    assert live.clock == audio[FIRST].size + audio[SECOND].size
    finals = {e.turn: e.output for e in rec.of(TurnFinal)}
    assert wer(REFERENCE[FIRST], finals[one].text) <= 0.25, finals[one].text
    assert wer(REFERENCE[SECOND], finals[two].text) <= 0.25, finals[two].text
    assert set(rec.done) == {one, two}
    assert {t.outcome for t in rec.done} == {"ok"} and not live.turns and not live.busy
    assert not await live.end_turn()  # nothing pushed since: no turn to end


@pytest.mark.asyncio(loop_scope="module")
async def test_server_vad_turns_on_the_real_engine(service: EngineService, clips: Any) -> None:
    """Two utterances with silence around them: each becomes one turn fed only its padded
    speech, with SpeechBegan / SpeechEnded on the session clock."""
    first, second = load_clip(FIRST), load_clip(SECOND)
    silence = np.zeros(RATE, dtype=np.float32)
    stream = np.concatenate([silence, first, silence, second, silence])
    rec = Recorder()
    live = LiveSession(service, rec, options=OPTIONS, vad=VadBatcher(load_vad_model("silero")),
                       turn_detection=TurnSettings(silence_duration_ms=500))
    for i in range(0, stream.size, 480):  # 30 ms chunks, like a live client
        await live.push(stream[i : i + 480])
    await live.wait_done()
    audio_side = [n for n in rec.names() if n in ("SpeechBegan", "TurnOpened", "SpeechEnded", "InputClosed")]
    assert audio_side == ["SpeechBegan", "TurnOpened", "SpeechEnded", "InputClosed"] * 2
    check_turn_order(rec)
    began, ended, opened = rec.of(SpeechBegan), rec.of(SpeechEnded), rec.of(TurnOpened)
    assert [b.turn_id for b in began] == [e.turn_id for e in ended] == [o.turn.id for o in opened]
    second_at = 2 * RATE + first.size
    for b, e, start, end in zip(began, ended, (RATE, second_at), (RATE + first.size, second_at + second.size)):
        # the speech lies inside the clip (give or take a 32 ms window), padded by prefix / suffix
        assert start / 16 - 32 - 300 <= b.audio_start_ms <= b.speech_start_ms < end / 16
        assert start / 16 < e.speech_end_ms <= e.audio_end_ms <= end / 16 + 32 + 100
    for b, e, o in zip(began, ended, opened):
        assert o.turn.start == b.audio_start_ms * 16
        assert o.turn.fed == (e.audio_end_ms - b.audio_start_ms) * 16  # silence between turns is not fed
    texts = [e.output.text for o in opened for e in rec.of(TurnFinal) if e.turn is o.turn]
    assert wer(REFERENCE[FIRST], texts[0]) <= 0.25 and wer(REFERENCE[SECOND], texts[1]) <= 0.25, texts
    assert live.clock == stream.size
    assert not await live.end_turn()  # the trailing silence holds no speech to end


# ---------------------------------------------------------------- the pump's contract


async def test_partials_deduplicated_and_a_failed_turn_detached() -> None:
    service, rec = ScriptedService(), Recorder()
    live = LiveSession(service, rec, options=OPTIONS, on_turn_done=rec.done.append)  # type: ignore[arg-type]
    await live.push(np.zeros(800, dtype=np.float32))
    (one,) = [e.turn for e in rec.of(TurnOpened)]
    for text in ("go", "go", "go forward", "go forward"):
        one.stream.put(RequestOutput(one.request_id, text=text))
        await settle()
    assert [(p.previous_text, p.output.text) for p in rec.of(TurnPartial)] == [("", "go"), ("go", "go forward")]
    one.stream.put(RequestOutput(one.request_id, finished=True, finish_reason="error", error="boom",
                                 error_stage="decode"))
    await settle()
    (failed,) = rec.of(TurnFailed)
    assert failed.turn is one and not failed.shutdown and live.current is None
    assert rec.done == [one] and one.outcome == "error" and one.request_id in service.closed
    await live.push(np.zeros(800, dtype=np.float32))  # later audio starts a new turn
    assert len(rec.of(TurnOpened)) == 2 and live.current is not None and live.current.start == 800


async def test_an_engine_ended_turn_takes_no_more_audio_and_still_closes() -> None:
    """A cache ceiling: the engine finishes the turn before its input ends. Later audio is not
    fed; end_turn still announces the close (a surface may hold the final until then)."""
    service, rec = ScriptedService(), Recorder()
    live = LiveSession(service, rec, options=OPTIONS)  # type: ignore[arg-type]
    await live.push(np.zeros(800, dtype=np.float32))
    turn = live.current
    assert turn is not None
    turn.stream.put(RequestOutput(turn.request_id, text="x", finished=True, finish_reason="length"))
    await settle()
    assert rec.names() == ["TurnOpened", "TurnFinal"] and turn.finished and not turn.closed.is_set()
    await live.push(np.zeros(800, dtype=np.float32))
    assert await live.end_turn()
    assert rec.names()[-1] == "InputClosed" and turn.closed.is_set()
    assert service.fed[turn.request_id] == [(800, False)]  # neither the later audio nor an end was sent


async def test_turn_opened_is_handled_before_any_output_of_the_turn() -> None:
    service, rec = ScriptedService(), Recorder()

    async def slow_surface(event: LiveEvent) -> None:
        if isinstance(event, TurnOpened):  # the engine answers while the surface is still busy
            event.turn.stream.put(RequestOutput(event.turn.request_id, text="early"))
            await settle()
        await rec(event)

    live = LiveSession(service, slow_surface, options=OPTIONS)  # type: ignore[arg-type]
    await live.push(np.zeros(800, dtype=np.float32))
    await settle()
    assert rec.names() == ["TurnOpened", "TurnPartial"]


async def test_refusals_manual_raises_server_vad_announces(clips: Any) -> None:
    service, rec = ScriptedService(), Recorder()
    service.refuse = EngineShutdownError("draining")
    manual = LiveSession(service, rec, options=OPTIONS)  # type: ignore[arg-type]
    with pytest.raises(EngineShutdownError):
        await manual.push(np.zeros(800, dtype=np.float32))
    assert rec.events == [] and manual.current is None

    speech = np.concatenate([np.zeros(RATE // 2, dtype=np.float32), load_clip(FIRST),
                             np.zeros(RATE, dtype=np.float32)])
    vad = LiveSession(service, rec, options=OPTIONS, vad=VadBatcher(load_vad_model("silero")),  # type: ignore[arg-type]
                      turn_detection=TurnSettings())
    for i in range(0, speech.size, 1600):
        await vad.push(speech[i : i + 1600])
    assert rec.names() == ["SpeechBegan", "TurnRefused", "SpeechEnded"]
    began, refused, ended = rec.events
    assert isinstance(began, SpeechBegan) and isinstance(refused, TurnRefused) and isinstance(ended, SpeechEnded)
    assert began.turn_id == refused.turn_id == ended.turn_id
    assert isinstance(refused.error, EngineShutdownError) and not service.streams


async def test_abort_clear_and_stop() -> None:
    service, rec = ScriptedService(), Recorder()
    live = LiveSession(service, rec, options=OPTIONS, on_turn_done=rec.done.append)  # type: ignore[arg-type]
    await live.push(np.zeros(800, dtype=np.float32))
    assert await live.end_turn()
    committed = rec.of(InputClosed)[0].turn
    assert live.busy  # its result is still to come
    await live.push(np.zeros(800, dtype=np.float32))
    assert live.clear() and live.current is None  # the open turn is dropped
    await settle()
    await live.push(np.zeros(800, dtype=np.float32))
    assert live.abort_all() == 2 and live.abort_all() == 0
    await settle()
    assert set(service.closed) == set(service.streams) and not live.turns and not live.busy
    assert {t.outcome for t in rec.done} == {"cancelled"} and committed in rec.done
    live.stop()
    await live.push(np.zeros(800, dtype=np.float32))
    assert not await live.end_turn() and len(service.streams) == 3 and live.clock == 2400


async def test_an_outside_abort_and_a_failing_surface_end_the_turn_only() -> None:
    service, rec = ScriptedService(), Recorder()
    live = LiveSession(service, rec, options=OPTIONS, on_turn_done=rec.done.append)  # type: ignore[arg-type]
    await live.push(np.zeros(800, dtype=np.float32))
    one = live.current
    assert one is not None
    one.stream.put(RequestOutput(one.request_id, finished=True, finish_reason="abort"))
    await settle()
    assert isinstance(rec.events[-1], TurnAborted) and rec.done == [one] and one.outcome == "cancelled"

    async def broken(event: LiveEvent) -> None:
        if isinstance(event, TurnPartial):
            raise RuntimeError("surface bug")

    live = LiveSession(service, broken, options=OPTIONS)  # type: ignore[arg-type]
    await live.push(np.zeros(800, dtype=np.float32))
    two = live.current
    assert two is not None
    two.stream.put(RequestOutput(two.request_id, text="hi"))
    await settle()
    assert two.request_id in service.closed and not live.turns  # the turn ended; the session goes on
    await live.push(np.zeros(800, dtype=np.float32))
    assert live.current is not None and live.current is not two


def test_server_vad_needs_a_model_at_its_rate() -> None:
    batcher = VadBatcher(load_vad_model("energy"))
    assert LiveSession(ScriptedService(), Recorder(), options=OPTIONS, vad=batcher).vad_available  # type: ignore[arg-type]
    at_8k = LiveSession(ScriptedService(8000), Recorder(), options=OPTIONS, vad=batcher)  # type: ignore[arg-type]
    assert not at_8k.vad_available
    with pytest.raises(ValueError, match="server VAD is not available"):
        at_8k.detect_turns(TurnSettings())
