"""A long offline request's collation (its VAD pass over the whole recording, then each window's
features) runs beside the engine thread while live streams are open (engine/models/whisper/
collate.py `collate_beside`): the streams keep their passes meanwhile. Driven by engine steps
and a VAD held on an event, never by timing; pinned to int8_w8a8."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tests.conftest import SAMPLE_RATE, Clip

MAX_STEPS = 5000


class HeldVAD:
    """The engine's own VAD, whose scoring waits until `release` is set."""

    def __init__(self, vad: Any) -> None:
        self.vad = vad
        self.name = vad.name
        self.release = threading.Event()
        self.called = threading.Event()

    def initial_state(self) -> Any:
        return self.vad.initial_state()

    def predict(self, windows: np.ndarray, states: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
        self.called.set()
        assert self.release.wait(120), "the test never released the VAD"
        return self.vad.predict(windows, states)  # type: ignore[no-any-return]

    def score_recording(self, audio: np.ndarray) -> np.ndarray:
        self.called.set()
        assert self.release.wait(120), "the test never released the VAD"
        return self.vad.score_recording(audio)  # type: ignore[no-any-return]


@contextlib.contextmanager
def held_vad(engine: Any) -> Iterator[HeldVAD]:
    """The engine's long-request VAD held on an event while inside."""
    collator = engine.runner.collator
    real = collator.vad
    vad = HeldVAD(real)
    collator.vad = vad
    try:
        yield vad
    finally:
        vad.release.set()
        collator.vad = real


def long_recording(clips: list[Clip]) -> np.ndarray:
    """Over 60 s of dev clips joined by 1 s pauses: a long request (VAD windows)."""
    parts: list[np.ndarray] = []
    total = 0
    for clip in sorted(clips, key=lambda c: c.id):
        if total > 62 * SAMPLE_RATE:
            break
        parts += [clip.audio, np.zeros(SAMPLE_RATE, np.float32)]
        total += clip.audio.size + SAMPLE_RATE
    return np.concatenate(parts)


def step_until_finished(engine: Any, outputs: dict[str, list[Any]], request_id: str) -> None:
    """Step `engine`, collecting outputs by request, until `request_id` finishes (or MAX_STEPS)."""
    for _ in range(MAX_STEPS):
        for out in engine.step():
            outputs[out.request_id].append(out)
        if outputs[request_id] and outputs[request_id][-1].finished:
            return


def test_a_stream_is_decoded_while_a_long_request_is_collated_beside(engine_int8: Any, clips: list[Clip]) -> None:
    engine = engine_int8
    audio = long_recording(clips)
    expected = engine.transcribe_outputs(audio)[0].text  # collated on the engine's thread (nothing else open)
    with held_vad(engine) as held:
        stream_and_long_request(engine, clips, audio, held, expected)


def stream_and_long_request(engine: Any, clips: list[Clip], audio: np.ndarray, held: HeldVAD, expected: str) -> None:
    stream = engine.add_streaming_request()
    live = clips[0].audio
    engine.feed_chunk(stream, live, is_last=True)
    long = engine.add_request(audio, streaming=False)
    outputs: dict[str, list[Any]] = {stream: [], long: []}
    step_until_finished(engine, outputs, stream)
    assert outputs[stream] and outputs[stream][-1].finished, "the stream never finished"
    assert outputs[stream][-1].text.strip(), "the stream's final has no text"
    assert held.called.is_set() and not outputs[long], "the long request moved while its VAD was held"

    held.release.set()
    step_until_finished(engine, outputs, long)
    assert outputs[long] and outputs[long][-1].finished, "the long request never finished"
    assert outputs[long][-1].text == expected  # the same transcript as collated on the engine's thread


def test_a_long_request_released_while_collated_beside_ends_without_output(engine_int8: Any, clips: list[Clip]) -> None:
    with held_vad(engine_int8) as held:
        released_while_held(engine_int8, clips, held)


def test_an_idle_engine_collates_a_long_request_itself(engine_int8: Any, clips: list[Clip]) -> None:
    """Nothing else open: the engine thread collates it (on every thread), nothing is handed over."""
    engine = engine_int8
    long = engine.add_request(long_recording(clips), streaming=False)
    engine.step()  # admits it and collates it in this step
    assert not engine.runner.collating_beside
    assert long in engine.runner.active
    engine.abort_request(long)
    engine.run()


def released_while_held(engine: Any, clips: list[Clip], held: HeldVAD) -> None:
    stream = engine.add_streaming_request()
    long = engine.add_request(long_recording(clips), streaming=False)
    for _ in range(MAX_STEPS):
        engine.step()
        if held.called.is_set():
            break
    assert held.called.is_set(), "the long request's VAD was never called"
    engine.abort_request(long)
    held.release.set()
    engine.feed_chunk(stream, clips[0].audio, is_last=True)
    seen: list[Any] = []
    for _ in range(MAX_STEPS):
        seen += engine.step()
        if not engine.runner.collating_beside and any(o.request_id == stream and o.finished for o in seen):
            break
    assert not engine.runner.collating_beside
    assert long not in engine.runner.active
    assert not [o for o in seen if o.request_id == long and o.text]  # nothing decoded for it
