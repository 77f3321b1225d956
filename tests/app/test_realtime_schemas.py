"""The GA event schemas (tests/schemas) accept what the session renders and catch what the
reference forbids, so the end-to-end checks that use them can fail."""

from __future__ import annotations

from app.realtime import events as ev
from app.realtime.config import InputFormat, NoiseReduction, SessionConfig, TranscriptionConfig, TurnDetection
from tests.realtime_schema import schema_errors


def test_rendered_events_match_the_ga_schemas() -> None:
    config = SessionConfig(InputFormat("pcmu", 8000), TurnDetection(idle_timeout_ms=5000),
                           TranscriptionConfig("whisper-1", "en", keywords=("OASR",), delay="low"),
                           NoiseReduction("far_field", 0.5), logprobs=True)
    logprobs = ev.logprob_entries([b" Hi", b"\xc3"], [-0.1, -2.5])
    events = [
        ev.server_event("session.created", session=config.render_ga("sess_1")),
        ev.server_event("session.updated", session=SessionConfig(turn_detection=TurnDetection(
            "semantic_vad", eagerness="high")).render_ga("sess_1")),
        ev.speech_started("item_1", 100, 400), ev.speech_stopped("item_1", 2000, 1900),
        ev.committed("item_1", None), ev.item_added("item_1", None, beta=False), ev.cleared(),
        ev.timeout_triggered("item_2", 0, 5000),
        ev.transcription_delta("item_1", "Hi", committed_text="Hi", tentative_text=" there", audio_end_ms=500,
                               server_ms=3, logprobs=logprobs),
        ev.transcription_completed("item_1", "Hi", audio_seconds=1.9, finish_reason="stop", language="en",
                                   audio_end_ms=2000, server_ms=40, logprobs=logprobs),
        ev.transcription_failed("item_3", "boom", code="recognition_failed", audio_end_ms=1, server_ms=1),
        ev.item_done("item_1", "Hi"), ev.error_event("bad", code="invalid_json"),
    ]
    for event in events:
        assert schema_errors(event) == [], event


def test_schemas_reject_what_the_reference_forbids() -> None:
    completed = ev.transcription_completed("item_1", "Hi", audio_seconds=1.0, finish_reason=None, language=None,
                                           audio_end_ms=1, server_ms=1)
    del completed["usage"]
    assert any("usage" in e for e in schema_errors(completed))
    delta = ev.transcription_delta("item_1", "x", committed_text="x", tentative_text=None, audio_end_ms=1,
                                   server_ms=1, logprobs=[{"token": "x", "logprob": 0.5, "bytes": [120]}])
    assert schema_errors(delta)  # a log-probability above 0
    session = SessionConfig(InputFormat("pcm16", 16000)).render_ga("s")
    assert schema_errors(ev.server_event("session.created", session=session))  # GA audio/pcm is 24 kHz only
    assert schema_errors({"type": "response.done", "event_id": "e"})  # no such event in a transcription session
    assert schema_errors(ev.speech_started("", 1, 1))
