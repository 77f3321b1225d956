"""A /v1/listen session over a scripted engine bridge (tests/app/bridge_double.py): how partials
and finals become `Results` (interim, is_final, from_finalize, speech_final, stream times),
that segments answer in order, Finalize with nothing in progress, CloseStream's Metadata,
failures that close the socket, and, with the real Silero VAD, SpeechStarted, endpoints and
UtteranceEnd on a recording with a pause. Every message is validated against the SDK's types."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import numpy as np
import pytest

from app.deepgram.params import QueryError
from app.deepgram.session import ListenSession
from app.settings import Settings
from engine import RequestOutput, Word
from tests.app.bridge_double import ScriptedService
from tests.app.test_deepgram_protocol import MODEL, parse, validate

PCM16 = "encoding=linear16&sample_rate=16000"


class Sender:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.close_code: int | None = None
        self.close_reason = ""

    @property
    def closed(self) -> bool:
        return self.close_code is not None

    async def send(self, message: dict[str, Any]) -> None:
        if not self.closed:
            message = json.loads(json.dumps(message))
            validate(message)
            self.messages.append(message)

    async def close(self, code: int, reason: str) -> None:
        if not self.closed:
            self.close_code, self.close_reason = code, reason

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == kind]


def session_for(query: str, vad: Any = None) -> tuple[ListenSession, ScriptedService, Sender]:
    service, sender = ScriptedService(), Sender()
    session = ListenSession(sender, service, parse(query), vad=vad, settings=Settings(), model=MODEL)  # type: ignore[arg-type]
    session.start()
    return session, service, sender


def pcm(seconds: float) -> bytes:
    return np.zeros(int(seconds * 16000), dtype="<i2").tobytes()


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def final(rid: str, text: str, words: list[Word] | None = None) -> RequestOutput:
    return RequestOutput(rid, text=text, finished=True, finish_reason="stop", words=words, language="en")


def summary(message: dict[str, Any]) -> tuple[Any, ...]:
    alt = message["channel"]["alternatives"][0]
    return (alt["transcript"], message["is_final"], message["speech_final"], message["from_finalize"],
            message["start"], message["duration"])


async def test_interim_and_final_results_with_finalize_and_close_stream() -> None:
    session, service, sender = session_for(PCM16 + "&interim_results=true")
    await session.handle_binary(pcm(1.0))
    stream = service.streams["req-0"]
    stream.put(RequestOutput("req-0", text="Hello wor", tentative="Hello wor", duration=0.5))
    await settle()
    stream.put(RequestOutput("req-0", text="Hello world", committed="Hello ", tentative="world", duration=0.75))
    await settle()
    await session.handle_text(json.dumps({"type": "Finalize"}))
    assert service.fed["req-0"][-1] == (0, True)
    stream.put(final("req-0", " Hello, world.", [Word(" Hello,", 0.1, 0.4, 0.9), Word(" world.", 0.5, 0.9, 0.7)]))
    await settle()
    await session.handle_binary(pcm(0.5))
    await session.handle_text(json.dumps({"type": "KeepAlive"}))
    closing = asyncio.ensure_future(session.handle_text(json.dumps({"type": "CloseStream"})))
    await settle()
    assert service.fed["req-1"][-1] == (0, True) and not closing.done()  # waits for the last final
    service.streams["req-1"].put(final("req-1", " Again.", [Word(" Again.", 0.05, 0.3, 0.95)]))
    await closing

    results = sender.of("Results")
    assert [summary(m) for m in results] == [
        ("hello wor", False, False, False, 0.0, 0.5),
        ("hello world", False, False, False, 0.0, 0.75),
        ("hello world", True, False, True, 0.0, 1.0),  # ended by Finalize: from_finalize, no endpoint
        ("again", True, False, False, 1.0, 0.5),  # stream times: the second segment starts at 1 s
    ]
    words = [w for m in results if m["is_final"] for w in m["channel"]["alternatives"][0]["words"]]
    assert [(w["word"], w["start"], w["end"]) for w in words] == [("hello", 0.1, 0.4), ("world", 0.5, 0.9),
                                                                 ("again", 1.05, 1.3)]
    assert "punctuated_word" not in words[0]  # punctuate is off: Deepgram's plain words
    assert results[2]["channel"]["alternatives"][0]["confidence"] == pytest.approx(0.8)
    assert sender.messages[-1]["type"] == "Metadata" and sender.close_code == 1000
    meta = sender.messages[-1]
    assert meta["duration"] == 1.5 and meta["sha256"] == hashlib.sha256(pcm(1.0) + pcm(0.5)).hexdigest()
    assert meta["request_id"] == results[0]["metadata"]["request_id"] == session.id
    assert service.closed == ["req-0", "req-1"]


async def test_punctuate_keeps_the_models_text_and_punctuated_words() -> None:
    session, service, sender = session_for(PCM16 + "&punctuate=true")
    await session.handle_binary(pcm(0.5))
    await session.handle_text(json.dumps({"type": "Finalize"}))
    service.streams["req-0"].put(final("req-0", " Hello,  world.", [Word(" Hello,", 0.1, 0.4, 0.9)]))
    await settle()
    (result,) = sender.of("Results")
    alt = result["channel"]["alternatives"][0]
    assert alt["transcript"] == "Hello, world." and alt["words"][0]["punctuated_word"] == "Hello,"


async def test_segments_answer_in_order_and_finalize_with_nothing_open_answers_empty() -> None:
    session, service, sender = session_for(PCM16)
    for _ in range(2):
        await session.handle_binary(pcm(0.5))
        await session.handle_text(json.dumps({"type": "Finalize"}))
    await session.handle_text(json.dumps({"type": "Finalize"}))  # nothing in progress
    service.streams["req-1"].put(final("req-1", "second"))
    await settle()
    assert sender.of("Results") == []  # the second segment waits for the first one's final
    service.streams["req-0"].put(final("req-0", "first"))
    await settle()
    assert [summary(m)[:4] for m in sender.of("Results")] == [
        ("first", True, False, True), ("second", True, False, True), ("", True, False, True)]
    assert sender.of("Results")[2]["start"] == 1.0


async def test_unknown_messages_get_an_error_and_the_session_goes_on() -> None:
    session, service, sender = session_for(PCM16)
    await session.handle_text("not json")
    await session.handle_text(json.dumps({"type": "Configure", "keyterms": ["x"]}))
    assert [m["variant"] for m in sender.of("Error")] == ["SchemaError", "SchemaError"]
    assert sender.of("Error")[1]["message"] == json.dumps({"type": "Configure", "keyterms": ["x"]})
    assert not sender.closed
    await session.handle_binary(pcm(0.1))
    assert list(service.streams) == ["req-0"]


async def test_audio_that_is_not_the_declared_encoding_closes_with_data_0000() -> None:
    session, _, sender = session_for(PCM16)
    await session.handle_binary(b"\x1a\x45\xdf\xa3" + bytes(100))  # a WebM header
    assert sender.close_code == 1008 and sender.close_reason.startswith("DATA-0000: the audio is a webm file")
    assert sender.of("Error")[0]["variant"] == "DataError"


async def test_a_failed_segment_closes_with_1011_and_the_reason() -> None:
    session, service, sender = session_for(PCM16)
    await session.handle_binary(pcm(0.2))
    service.streams["req-0"].put(RequestOutput("req-0", finished=True, finish_reason="error", error="boom",
                                               error_stage="decode"))
    await settle()
    assert sender.close_code == 1011 and "recognition failed at decode: boom" in sender.close_reason
    session.abort_all()


async def test_an_empty_binary_message_ends_the_stream_like_close_stream() -> None:
    session, service, sender = session_for(PCM16)
    await session.handle_binary(pcm(0.2))
    closing = asyncio.ensure_future(session.handle_binary(b""))
    await settle()
    service.streams["req-0"].put(final("req-0", "bye"))
    await closing
    assert [m["type"] for m in sender.messages] == ["Results", "Metadata"] and sender.close_code == 1000


async def test_language_and_keywords_reach_the_decoding_options() -> None:
    session, _, _ = session_for(PCM16 + "&language=en-GB&keyterm=Kubernetes&keywords=kubectl:3")
    options = session.live.options
    assert (options.language, options.keywords, options.word_timestamps) == ("en", ("kubectl", "Kubernetes"), True)
    session.abort_all()


def test_options_the_model_or_server_cannot_serve_are_query_errors() -> None:
    with pytest.raises(QueryError, match="English-only"):
        session_for(PCM16 + "&language=de")
    with pytest.raises(QueryError, match="need the server VAD"):
        session_for(PCM16 + "&vad_events=true")  # no VAD batcher given


async def test_vad_segments_speech_final_speech_started_and_utterance_end(clips: Any) -> None:
    """Two utterances 1.5 s apart (tests/e2e/test_realtime_common.py): each is a segment whose
    final is speech_final; UtteranceEnd (1000 ms) comes between the two finals and names the
    first segment's last word."""
    from app.live.vad import VadBatcher
    from engine.vad import load_vad_model
    from tests.e2e.test_realtime_common import recording_with_pauses

    audio, expected = recording_with_pauses()
    session, service, sender = session_for(PCM16 + "&interim_results=true&utterance_end_ms=1000&vad_events=true",
                                           vad=VadBatcher(load_vad_model("silero")))
    data = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    answered: set[str] = set()
    for i in range(0, len(data), 3200):  # 100 ms messages
        await session.handle_binary(data[i : i + 3200])
        for rid, fed in service.fed.items():
            if fed and fed[-1][1] and rid not in answered:  # the VAD ended this segment: answer it
                answered.add(rid)
                heard = sum(n for n, _ in fed) / 16000
                service.streams[rid].put(final(rid, "word.", [Word(" word.", 0.3, heard - 0.6, 0.9)]))
        await settle()
    assert len(answered) == 2, service.fed
    kinds = [m["type"] for m in sender.messages]
    assert kinds[:5] == ["SpeechStarted", "Results", "UtteranceEnd", "SpeechStarted", "Results"] or \
        kinds[:5] == ["SpeechStarted", "SpeechStarted", "Results", "UtteranceEnd", "Results"], kinds
    first, second = sender.of("Results")[:2]
    assert first["speech_final"] and second["speech_final"] and not first["from_finalize"]
    started = [m["timestamp"] * 1000 for m in sender.of("SpeechStarted")]
    assert [abs(s - on) < 200 for s, (on, _) in zip(started, expected)] == [True, True], (started, expected)
    ends = sender.of("UtteranceEnd")
    assert ends[0]["last_word_end"] == first["channel"]["alternatives"][0]["words"][-1]["end"]
    session.abort_all()
