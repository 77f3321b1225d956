"""The realtime protocol without a server: session.update parsing in both shapes (formats, VAD
knobs, semantic VAD, keywords, languages, delay, noise reduction, include), audio payload
decoding and container refusal, and a session driven by a scripted engine bridge to pin how
partials become delta events (increments, revisions, committed text, logprobs), how a turn
ends, the idle timeout, and the event log a resumed connection replays."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from app.audio.g711 import mulaw_to_float
from app.live.sender import EventSender
from app.realtime.audio_input import container_of, decode_base64, decode_chunk
from app.realtime.config import (
    InputFormat,
    NoiseReduction,
    SessionConfig,
    TranscriptionConfig,
    TurnDetection,
    VadSettings,
)
from app.realtime.events import ProtocolError, error_event, server_event
from app.realtime.semantic import silence_for
from app.realtime.session import RealtimeSession
from app.realtime.update import parse_beta_update, parse_ga_update
from engine import RequestOutput
from tests.app.bridge_double import ScriptedService

VAD = VadSettings(threshold=0.5, prefix_padding_ms=300, silence_duration_ms=500)


def ga(input_: dict[str, Any], **session: Any) -> dict[str, Any]:
    return {"type": "session.update", "session": {"type": "transcription", "audio": {"input": input_}, **session}}


def raises(code: str, fn: Any, *args: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as exc:
        fn(*args)
    assert exc.value.code == code, exc.value.message
    return exc.value


# ---------------------------------------------------------------- session.update


@pytest.mark.parametrize(("fmt", "expected"), [
    ({"type": "audio/pcm", "rate": 24000}, InputFormat("pcm16", 24000)),
    ({"type": "audio/pcm", "rate": 16000}, InputFormat("pcm16", 16000)),
    ({"type": "audio/pcm", "rate": 8000}, InputFormat("pcm16", 8000)),
    ({"type": "audio/pcm"}, InputFormat("pcm16", 24000)),
    ({"type": "audio/pcmu"}, InputFormat("pcmu", 8000)),
    ({"type": "audio/pcma", "rate": 8000}, InputFormat("pcma", 8000)),
])
def test_ga_formats(fmt: dict[str, Any], expected: InputFormat) -> None:
    assert parse_ga_update(ga({"format": fmt}), SessionConfig(), VAD).input_format == expected


@pytest.mark.parametrize(("fmt", "param"), [
    ({"type": "audio/pcm", "rate": 22050}, "session.audio.input.format.rate"),
    ({"type": "audio/pcm", "rate": True}, "session.audio.input.format.rate"),
    ({"type": "audio/pcmu", "rate": 16000}, "session.audio.input.format.rate"),
    ({"type": "audio/wav"}, "session.audio.input.format.type"),
    ({"type": []}, "session.audio.input.format.type"),
    ({"type": {}}, "session.audio.input.format.type"),
])
def test_ga_bad_formats_name_the_field(fmt: dict[str, Any], param: str) -> None:
    err = raises("invalid_value", parse_ga_update, ga({"format": fmt}), SessionConfig(), VAD)
    assert err.param == param


@pytest.mark.parametrize("parse", [parse_ga_update, parse_beta_update])
def test_the_reference_designs_flat_session_keys_are_honoured(parse: Any) -> None:
    update = {"type": "session.update", "session": {"sample_rate": 16000, "encoding": "pcm16", "language": "en",
                                                    "prompt": "OASR", "task": "transcribe", "interim_results": False,
                                                    "model": "whisper-1"}}
    config = parse(update, SessionConfig(), VAD)
    assert config.input_format == InputFormat("pcm16", 16000)
    assert (config.transcription.language, config.transcription.prompt, config.transcription.model) == (
        "en", "OASR", "whisper-1")
    assert config.interim is False
    mulaw = parse({"type": "session.update", "session": {"encoding": "mulaw"}}, SessionConfig(), VAD)
    assert mulaw.input_format == InputFormat("pcmu", 8000)


@pytest.mark.parametrize(("session", "code", "param"), [
    ({"encoding": "f32"}, "unsupported_value", "session.encoding"),
    ({"sample_rate": 22050}, "invalid_value", "session.sample_rate"),
    ({"encoding": "mulaw", "sample_rate": 16000}, "invalid_value", "session.sample_rate"),
    ({"task": "translate"}, "unsupported_value", "session.task"),
    ({"interim_results": "no"}, "invalid_value", "session.interim_results"),
    ({"sample_rate": 16000, "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}, "invalid_value",
     "session.sample_rate"),
])
def test_flat_session_keys_that_cannot_be_served_are_refused_never_ignored(session: dict[str, Any], code: str,
                                                                          param: str) -> None:
    err = raises(code, parse_ga_update, {"type": "session.update", "session": session}, SessionConfig(), VAD)
    assert err.param == param


def test_ga_update_changes_only_what_it_names() -> None:
    start = SessionConfig(InputFormat("pcm16", 16000), transcription=TranscriptionConfig("m", "en"))
    config = parse_ga_update(ga({"turn_detection": None}), start, VAD)
    assert config == SessionConfig(InputFormat("pcm16", 16000), turn_detection=None,
                                   transcription=TranscriptionConfig("m", "en"))
    config = parse_ga_update(ga({"transcription": {"prompt": "Kubernetes"}}), config, VAD)
    assert config.transcription == TranscriptionConfig("m", "en", "Kubernetes")
    config = parse_ga_update(ga({"transcription": {"keywords": ["Kubernetes", " etcd "], "delay": "high"}},
                                include=["item.input_audio_transcription.logprobs"]), config, VAD)
    assert config.transcription == TranscriptionConfig("m", "en", "Kubernetes", keywords=("Kubernetes", "etcd"),
                                                       delay="high")
    assert config.logprobs and config.render_ga("s")["include"] == ["item.input_audio_transcription.logprobs"]
    config = parse_ga_update(ga({"transcription": {"languages": ["en"]}}), config, VAD)
    assert (config.transcription.language, config.transcription.languages) == (None, ("en",))


def test_only_transcription_sessions() -> None:
    err = raises("unsupported_session_type", parse_ga_update, ga({}, type="realtime"), SessionConfig(), VAD)
    assert err.param == "session.type"


def test_server_vad_knobs_are_per_session_with_the_servers_as_defaults() -> None:
    event = ga({"turn_detection": {"type": "server_vad", "threshold": 0.7, "silence_duration_ms": 200,
                                   "idle_timeout_ms": 5000, "create_response": True}})
    td = parse_ga_update(event, SessionConfig(turn_detection=None), VAD).turn_detection
    assert td == TurnDetection("server_vad", 0.7, VAD.prefix_padding_ms, 200, idle_timeout_ms=5000)
    beta = {"type": "transcription_session.update", "session": {"turn_detection": {"type": "server_vad"}}}
    assert parse_beta_update(beta, SessionConfig(turn_detection=None), VAD).turn_detection == VAD.detection()


@pytest.mark.parametrize(("key", "value"), [("threshold", 1.5), ("threshold", True), ("silence_duration_ms", -1),
                                            ("prefix_padding_ms", 2.5), ("idle_timeout_ms", 10)])
def test_bad_server_vad_knobs_name_the_field(key: str, value: Any) -> None:
    err = raises("invalid_value", parse_ga_update, ga({"turn_detection": {"type": "server_vad", key: value}}),
                 SessionConfig(), VAD)
    assert err.param == f"session.audio.input.turn_detection.{key}"


def test_semantic_vad_and_its_eagerness() -> None:
    td = parse_ga_update(ga({"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}), SessionConfig(),
                         VAD).turn_detection
    assert td is not None and (td.type, td.eagerness) == ("semantic_vad", "high")
    assert td.render() == {"type": "semantic_vad", "eagerness": "high"}
    raises("invalid_value", parse_ga_update, ga({"turn_detection": {"type": "semantic_vad", "eagerness": "now"}}),
           SessionConfig(), VAD)
    raises("unsupported_turn_detection", parse_ga_update, ga({"turn_detection": {"type": "push_to_talk"}}),
           SessionConfig(), VAD)


def test_semantic_silence_follows_the_transcript_and_eagerness() -> None:
    assert silence_for("", "auto") == silence_for("", "medium") == 800
    assert silence_for("I hardly know her.", "medium") == 400  # a sentence ended: sooner
    assert silence_for("I hardly know her", "medium") == 800  # a clause complete, no punctuation
    assert silence_for("I went to the", "medium") == 3200  # mid-clause: wait
    assert silence_for("and then, um", "high") == 1600
    assert silence_for("so I said,", "low") == 6000
    assert silence_for("Well.", "high") < silence_for("Well.", "medium") < silence_for("Well.", "low")


@pytest.mark.parametrize("word", ["<b>bold</b>", "a > b", "two\nlines"])
def test_a_bad_keyword_rejects_the_whole_update(word: str) -> None:
    event = ga({"format": {"type": "audio/pcmu"}, "transcription": {"keywords": ["fine", word]}})
    err = raises("invalid_value", parse_ga_update, event, SessionConfig(), VAD)
    assert err.param == "session.audio.input.transcription.keywords[1]"


def test_language_with_languages_delay_include_and_noise_reduction_are_checked() -> None:
    both = ga({"transcription": {"language": "en", "languages": ["en"]}})
    assert raises("invalid_value", parse_ga_update, both, SessionConfig(), VAD).param.endswith(".languages")
    raises("invalid_value", parse_ga_update, ga({"transcription": {"delay": "later"}}), SessionConfig(), VAD)
    window = parse_ga_update(ga({"transcription": {"stream_context": [70, 2, 2]}}), SessionConfig(), VAD)
    assert window.transcription.stream_context == (70, 2, 2)
    assert window.render_ga("s")["audio"]["input"]["transcription"]["stream_context"] == [70, 2, 2]
    for bad in ([70, 2], [70, -1, 2], [70, 2.5, 2], "70,2,2", [True, 2, 2]):
        err = raises("invalid_value", parse_ga_update, ga({"transcription": {"stream_context": bad}}), SessionConfig(), VAD)
        assert err.param.endswith(".stream_context")
    raises("invalid_value", parse_ga_update, ga({}, include=["item.other"]), SessionConfig(), VAD)
    raises("invalid_value", parse_ga_update, ga({"noise_reduction": {"type": "studio"}}), SessionConfig(), VAD)
    config = parse_ga_update(ga({"noise_reduction": {"type": "far_field"}}), SessionConfig(), VAD)
    assert config.noise_reduction == NoiseReduction("far_field", 1.0)
    config = parse_ga_update(ga({"noise_reduction": {"strength": 0.5}}), config, VAD)  # keeps the type
    assert config.noise_reduction == NoiseReduction("far_field", 0.5)
    beta = {"session": {"input_audio_noise_reduction": {"type": "near_field"}, "include": None}}
    assert parse_beta_update(beta, config, VAD).noise_reduction == NoiseReduction("near_field", 0.5)


@pytest.mark.parametrize(("name", "expected"), [
    ("pcm16", InputFormat("pcm16", 24000)), ("g711_ulaw", InputFormat("pcmu", 8000)),
    ("g711_alaw", InputFormat("pcma", 8000)),
])
def test_beta_formats(name: str, expected: InputFormat) -> None:
    event = {"type": "transcription_session.update", "session": {
        "input_audio_format": name, "input_audio_transcription": {"model": "whisper-1", "language": "en"},
        "turn_detection": None}}
    config = parse_beta_update(event, SessionConfig(), VAD)
    assert config == SessionConfig(expected, turn_detection=None, transcription=TranscriptionConfig("whisper-1", "en"))
    raises("invalid_value", parse_beta_update, {"session": {"input_audio_format": "opus"}}, SessionConfig(), VAD)


def test_rendered_sessions_parse_back_to_the_same_config() -> None:
    config = SessionConfig(InputFormat("pcma", 8000), turn_detection=TurnDetection(idle_timeout_ms=4000),
                           transcription=TranscriptionConfig(None, "en", keywords=("OASR",), delay="low"),
                           noise_reduction=NoiseReduction("near_field", 0.75), logprobs=True)
    ga_session = config.render_ga("sess_1")
    assert parse_ga_update({"session": ga_session}, SessionConfig(), VAD) == config
    beta_session = config.render_beta("sess_1")
    assert parse_beta_update({"session": beta_session}, SessionConfig(), VAD) == config


def test_transcription_fields_must_be_strings() -> None:
    err = raises("invalid_value", parse_ga_update, ga({"transcription": {"language": 7}}), SessionConfig(), VAD)
    assert err.param == "session.audio.input.transcription.language"


# ---------------------------------------------------------------- audio payloads


def test_pcm16_and_g711_payloads_decode() -> None:
    samples = np.array([0, 16384, -32768, 32767], dtype="<i2")
    out = decode_chunk(samples.tobytes(), InputFormat("pcm16", 24000))
    np.testing.assert_allclose(out, samples / 32768.0, atol=1e-4)
    mu = bytes(range(0, 256, 17))
    np.testing.assert_array_equal(decode_chunk(mu, InputFormat("pcmu", 8000)), mulaw_to_float(mu))
    err = raises("invalid_audio", decode_chunk, b"\x00\x01\x02", InputFormat("pcm16", 24000))
    assert "even number of bytes" in err.message


def _file(fmt: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(1600, dtype=np.float32), 16000, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize(("data", "name"), [
    (_file("WAV"), "wav"), (_file("FLAC"), "flac"), (_file("OGG"), "ogg"),
    (b"ID3\x04\x00\x00\x00\x00\x00\x10" + bytes(64), "mp3 (ID3 tag)"),
])
def test_container_files_are_refused_with_the_file_endpoint(data: bytes, name: str) -> None:
    assert container_of(data) == name
    err = raises("invalid_audio_format", decode_chunk, data, InputFormat("pcm16", 16000))
    assert "/v1/audio/transcriptions" in err.message and name in err.message


def test_plain_pcm_is_not_mistaken_for_a_file() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        chunk = (rng.standard_normal(480) * 8000).astype("<i2").tobytes()
        assert container_of(chunk) is None


def test_base64_field() -> None:
    assert decode_base64(base64.b64encode(b"\x01\x02").decode()) == b"\x01\x02"
    raises("invalid_value", decode_base64, "not base64!")
    raises("invalid_value", decode_base64, None)


def test_events_have_unique_ids_and_openai_error_shape() -> None:
    ids = {server_event("x")["event_id"] for _ in range(1000)}
    assert len(ids) == 1000
    err = error_event("bad", code="invalid_json", param="type", client_event_id="evt_9")
    assert err["type"] == "error"
    assert err["error"] == {"type": "invalid_request_error", "code": "invalid_json", "message": "bad",
                            "param": "type", "event_id": "evt_9"}


# ---------------------------------------------------------------- a session over a scripted bridge


class ListSender:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.closed = False

    async def send(self, event: dict[str, Any]) -> None:
        self.events.append(json.loads(json.dumps(event)))

    async def close(self, code: int, reason: str) -> None:
        self.closed = True


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_deltas_carry_only_committed_text_and_join_to_the_completed_transcript() -> None:
    service, sender = ScriptedService(), ListSender()
    session = RealtimeSession(sender, service, vad_batcher=None, vad=VAD)  # type: ignore[arg-type]
    await session.start()
    await session.handle_text(json.dumps(ga({"format": {"type": "audio/pcm", "rate": 16000},
                                             "turn_detection": None})))
    await session.handle_binary(np.zeros(8000, dtype="<i2").tobytes())  # 0.5 s
    (rid,) = service.streams
    stream = service.streams[rid]
    script = (("", "Hello war"), ("Hello ", "word"), ("Hello word ", "now"), ("Hello word ", "now"))
    for committed, tentative in script:
        stream.put(RequestOutput(rid, text=committed + tentative, committed=committed, tentative=tentative,
                                 duration=0.25))
        await settle()
    await session.handle_text(json.dumps({"type": "input_audio_buffer.commit"}))
    stream.put(RequestOutput(rid, text="Hello word now.", finished=True, finish_reason="stop", duration=0.5,
                             language="en"))
    await settle()
    kinds = [e["type"] for e in sender.events]
    delta, done = "conversation.item.input_audio_transcription.delta", "conversation.item.input_audio_transcription.completed"
    # The first partial commits nothing (no event); the tentative "war" never goes out, so its
    # revision needs none; the final sends the rest before `completed`.
    assert kinds == ["session.created", "session.updated", delta, delta, "input_audio_buffer.committed",
                     "conversation.item.added", delta, done, "conversation.item.done"]
    d1, d2, d3 = sender.events[2], sender.events[3], sender.events[6]
    assert [d["delta"] for d in (d1, d2, d3)] == ["Hello ", "word ", "now."]
    assert "".join(d["delta"] for d in (d1, d2, d3)) == sender.events[7]["transcript"]
    assert all("text" not in d and "tentative" not in d for d in (d1, d2, d3))  # tentative: opt-in only
    assert [d["committed"] for d in (d1, d2)] == ["Hello ", "Hello word "]
    assert d1["audio_end_ms"] == 250 and d1["server_ms"] >= 0
    added, done, item = sender.events[5], sender.events[7], sender.events[8]
    assert added["item"]["content"] == [{"type": "input_audio", "transcript": None}]
    assert item["item"]["id"] == done["item_id"] == d1["item_id"]
    assert item["item"]["content"] == [{"type": "input_audio", "transcript": "Hello word now."}]
    assert "logprobs" not in done and "logprobs" not in d1  # not asked for
    assert done["transcript"] == "Hello word now." and done["audio_end_ms"] == 500
    assert done["usage"] == {"type": "duration", "seconds": 0.5} and done["finish_reason"] == "stop"
    assert service.fed[rid][-1] == (0, True)  # the commit ended the engine request's input
    assert not session.busy and rid in service.closed


async def test_tentative_text_is_an_opt_in_extension_beside_append_only_deltas() -> None:
    service, sender = ScriptedService(), ListSender()
    session = RealtimeSession(sender, service, vad_batcher=None, vad=VAD)  # type: ignore[arg-type]
    await session.start()
    update = ga({"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None})
    update["session"]["include"] = ["item.input_audio_transcription.tentative"]
    await session.handle_text(json.dumps(update))
    assert sender.events[-1]["session"]["include"] == ["item.input_audio_transcription.tentative"]
    await session.handle_binary(np.zeros(8000, dtype="<i2").tobytes())
    (rid,) = service.streams
    for committed, tentative in (("", "Hello war"), ("Hello ", "word")):
        service.streams[rid].put(RequestOutput(rid, text=committed + tentative, committed=committed,
                                               tentative=tentative, duration=0.25))
        await settle()
    d1, d2 = sender.events[-2:]
    assert [(d["delta"], d["committed"], d["tentative"]) for d in (d1, d2)] == [
        ("", "", "Hello war"), ("Hello ", "Hello ", "word")]  # the revision of "war" is in `tentative` only


async def test_unsupported_language_and_engine_failure() -> None:
    service, sender = ScriptedService(), ListSender()
    session = RealtimeSession(sender, service, vad_batcher=None, vad=VAD)  # type: ignore[arg-type]
    await session.handle_text(json.dumps(ga({"transcription": {"language": "de"}})))
    assert sender.events[-1]["error"]["code"] == "invalid_value"
    await session.handle_text(json.dumps(ga({"turn_detection": {"type": "server_vad"}})))
    assert sender.events[-1]["error"]["code"] == "server_vad_unavailable"  # no VAD model given
    await session.handle_text(json.dumps(ga({"turn_detection": None})))
    await session.handle_binary(np.zeros(480, dtype="<i2").tobytes())
    (rid,) = service.streams
    await session.handle_text(json.dumps({"type": "input_audio_buffer.commit"}))
    service.streams[rid].put(RequestOutput(rid, finished=True, finish_reason="error", error="boom",
                                           error_stage="decode"))
    await settle()
    failed = sender.events[-2]
    assert sender.events[-1]["type"] == "conversation.item.done"
    assert failed["type"] == "conversation.item.input_audio_transcription.failed"
    assert failed["error"]["code"] == "recognition_failed" and "boom" in failed["error"]["message"]


async def test_disconnect_aborts_open_requests() -> None:
    service, sender = ScriptedService(), ListSender()
    session = RealtimeSession(sender, service, vad_batcher=None, vad=VAD)  # type: ignore[arg-type]
    await session.handle_text(json.dumps(ga({"turn_detection": None})))
    await session.handle_binary(np.zeros(480, dtype="<i2").tobytes())
    assert len(service.streams) == 1 and not service.closed
    assert not session.busy  # an uncommitted turn does not keep a silent client's session alive
    session.abort_all()
    await settle()
    assert list(service.streams) == service.closed[:1] and not session.busy


# ---------------------------------------------------------------- chunking_strategy


def test_chunking_strategy_forms() -> None:
    from app.chunking import ChunkingStrategy, parse_chunking_strategy
    from app.errors import ApiError

    defaults = ChunkingStrategy(threshold=0.4, silence_duration_ms=600, prefix_padding_ms=250)
    assert parse_chunking_strategy([("model", "x")], defaults) is None
    assert parse_chunking_strategy([("chunking_strategy", "auto")], defaults) == defaults
    assert parse_chunking_strategy([("chunking_strategy", '{"type": "server_vad", "silence_duration_ms": 300}')],
                                   defaults) == ChunkingStrategy(0.4, 300, 250)
    sdk_fields = [("chunking_strategy[type]", "server_vad"), ("chunking_strategy[threshold]", "0.6"),
                  ("chunking_strategy[prefix_padding_ms]", "100")]
    assert parse_chunking_strategy(sdk_fields, defaults) == ChunkingStrategy(0.6, 600, 100)
    for bad in ("sometimes", '{"type": "semantic_vad"}', '{"type": "server_vad", "threshold": 1.5}',
                '{"type": "server_vad", "silence_duration_ms": 2.5}', '{"type": "server_vad", "x": 1}', "[1]"):
        with pytest.raises(ApiError) as exc:
            parse_chunking_strategy([("chunking_strategy", bad)], defaults)
        assert exc.value.status == 400 and exc.value.param == "chunking_strategy"


def test_merged_segments_sit_at_their_speech_boundaries() -> None:
    from app.chunking import merge_segments
    from engine import Segment, Word

    outs = [
        RequestOutput("a", text=" Hello there.", finished=True, finish_reason="stop", language="en",
                      segments=[Segment(0, 0.0, 1.0, " Hello there.", tokens=[1, 2], avg_logprob=-0.2)],
                      words=[Word(" Hello", 0.1, 0.5, 0.9), Word(" there.", 0.5, 0.9, 0.8)]),
        RequestOutput("b", text="", finished=True, finish_reason="stop", segments=[], words=[]),
        RequestOutput("c", text=" Bye.", finished=True, finish_reason="length",
                      segments=[Segment(0, 0.0, 0.4, " Bye.", tokens=[3], avg_logprob=-0.4)],
                      words=[Word(" Bye.", 0.0, 0.3, 0.7)]),
    ]
    out = merge_segments([(1.0, 2.5), (3.0, 3.4), (5.0, 6.0)], outs, duration=7.0)
    assert out.text == "Hello there. Bye." and out.duration == 7.0 and out.finish_reason == "length"
    assert [(s.id, s.start, s.end, s.text) for s in out.segments] == [(0, 1.0, 2.5, " Hello there."),
                                                                      (1, 5.0, 6.0, " Bye.")]
    assert [(w.start, w.end) for w in out.words or []] == [(1.1, 1.5), (1.5, 1.9), (5.0, 5.3)]
    assert out.segments[0].tokens == [1, 2] and out.language == "en"


# ---------------------------------------------------------------- batched server VAD


async def test_vad_batcher_batches_sessions_and_matches_one_by_one_detection(clips: Any) -> None:
    from app.live.vad import VadBatcher
    from engine.vad import SpeechStarted, SpeechStopped, TurnAudio, TurnSettings, load_vad_model
    from tests.conftest import load_clip

    model = load_vad_model("silero")
    quiet = (np.random.default_rng(1).standard_normal(16000) * 1e-4).astype(np.float32)
    speech = [load_clip(c) for c in ("ps_cards_001", "ps_cards_002", "ps_cards_003", "ps_goforward")]
    streams = [np.concatenate([quiet[: 4000 * (i + 1)], s, quiet, speech[-1 - i], quiet]) for i, s in enumerate(speech)]
    settings = TurnSettings(silence_duration_ms=300)

    def summary(events: list[Any]) -> list[tuple[str, int]]:
        out = []
        for e in events:
            if isinstance(e, SpeechStarted):
                out.append(("start", e.audio_start_ms))
            elif isinstance(e, SpeechStopped):
                out.append(("stop", e.audio_end_ms))
            elif isinstance(e, TurnAudio):
                out.append(("audio", e.audio.size))
        return out

    alone = []
    for audio in streams:
        detector = VadBatcher(model).detector(settings)
        events = [e for i in range(0, audio.size, 480) for e in detector.feed(audio[i : i + 480])]
        alone.append(summary(events + detector.flush()))

    batcher = VadBatcher(model)
    detectors = [batcher.detector(settings) for _ in streams]

    async def run(detector: Any, audio: np.ndarray) -> list[tuple[str, int]]:
        events = []
        for i in range(0, audio.size, 480):  # 30 ms chunks, like a live client
            events += await batcher.feed(detector, audio[i : i + 480])
        return summary(events + detector.flush())

    together = await asyncio.gather(*(run(d, a) for d, a in zip(detectors, streams)))
    assert together == alone
    assert all(sum(kind == "start" for kind, _ in events) == 2 for events in together), together
    chunks = sum(-(-a.size // 480) for a in streams)
    assert batcher.batches < chunks * 0.75  # chunks of different sessions were scored together


async def test_manual_commit_under_server_vad_closes_the_turn_in_progress(clips: Any) -> None:
    """Speech runs into the end of what the client sent; its commit ends the turn there, and
    the session's clock carries on for the next detector."""
    from app.live.vad import VadBatcher
    from engine.vad import load_vad_model
    from tests.conftest import load_clip

    service, sender = ScriptedService(), ListSender()
    session = RealtimeSession(sender, service, vad_batcher=VadBatcher(load_vad_model("silero")),  # type: ignore[arg-type]
                              vad=VAD)
    await session.handle_text(json.dumps(ga({"format": {"type": "audio/pcm", "rate": 16000}})))
    speech = load_clip("ps_goforward")[: 16000 * 2]  # cut mid-sentence: no trailing silence
    pcm = (np.clip(speech, -1, 1) * 32767).astype("<i2").tobytes()
    for i in range(0, len(pcm), 640):
        await session.handle_binary(pcm[i : i + 640])
    assert [e["type"] for e in sender.events][-1] == "input_audio_buffer.speech_started"
    await session.handle_text(json.dumps({"type": "input_audio_buffer.commit"}))
    stopped, committed, _ = sender.events[-3:]
    assert stopped["type"] == "input_audio_buffer.speech_stopped" and committed["type"] == "input_audio_buffer.committed"
    assert stopped["audio_end_ms"] == 2000 and stopped["item_id"] == committed["item_id"]
    (rid,) = service.streams
    fed = sum(n for n, _ in service.fed[rid])
    started = next(e for e in sender.events if e["type"] == "input_audio_buffer.speech_started")
    assert fed == (2000 - started["audio_start_ms"]) * 16  # the turn's audio, from its padded start
    assert service.fed[rid][-1] == (0, True)
    service.streams[rid].put(RequestOutput(rid, text="go forward", finished=True, finish_reason="stop"))
    await settle()
    assert sender.events[-2]["type"] == "conversation.item.input_audio_transcription.completed"
    assert sender.events[-2]["audio_end_ms"] == 2000


async def test_logprobs_go_with_deltas_and_the_completed_transcript() -> None:
    service, sender = ScriptedService(), ListSender()
    session = RealtimeSession(sender, service, vad_batcher=None, vad=VAD)  # type: ignore[arg-type]
    await session.handle_text(json.dumps(ga({"turn_detection": None}, include=["item.input_audio_transcription.logprobs"])))
    await session.handle_binary(np.zeros(4800, dtype="<i2").tobytes())
    (rid,) = service.streams

    def out(pieces: list[bytes], **fields: Any) -> RequestOutput:
        text = b"".join(pieces).decode().strip()
        return RequestOutput(rid, text=text, tokens=list(range(len(pieces))), token_bytes=pieces,
                             token_logprobs=[-0.1 * (i + 1) for i in range(len(pieces))], duration=0.2, **fields)

    service.streams[rid].put(out([b" Hello", b" war"], committed="", tentative="Hello war"))
    await settle()
    revised = out([b" Hello", b" word"], committed="Hello ", tentative="word")
    revised.tokens = [0, 7]  # the second token changed
    service.streams[rid].put(revised)
    await settle()
    await session.handle_text(json.dumps({"type": "input_audio_buffer.commit"}))
    service.streams[rid].put(out([b" Hello", b" world", b"."], finished=True, finish_reason="stop"))
    await settle()
    deltas = [e for e in sender.events if e["type"].endswith("transcription.delta")]
    # Each delta's logprobs are its own text's tokens: "Hello " then, at the end, "world."
    assert [d["delta"] for d in deltas] == ["Hello ", "world."]
    assert [[lp["token"] for lp in d["logprobs"]] for d in deltas] == [[" Hello"], [" world", "."]]
    assert deltas[0]["logprobs"][0] == {"token": " Hello", "logprob": -0.1, "bytes": list(b" Hello")}
    done = next(e for e in sender.events if e["type"].endswith("transcription.completed"))
    assert [lp["token"] for lp in done["logprobs"]] == [" Hello", " world", "."]


async def test_idle_timeout_commits_an_empty_item_per_silent_stretch(clips: Any) -> None:
    from app.live.vad import VadBatcher
    from engine.vad import load_vad_model

    service, sender = ScriptedService(), ListSender()
    session = RealtimeSession(sender, service, vad_batcher=VadBatcher(load_vad_model("silero")),  # type: ignore[arg-type]
                              vad=VAD)
    await session.handle_text(json.dumps(ga({"format": {"type": "audio/pcm", "rate": 16000},
                                             "turn_detection": {"type": "server_vad", "idle_timeout_ms": 1000}})))
    quiet = (np.random.default_rng(0).standard_normal(16000 * 5 // 2) * 30).astype("<i2").tobytes()  # 2.5 s
    for i in range(0, len(quiet), 640):
        await session.handle_binary(quiet[i : i + 640])
    timeouts = [e for e in sender.events if e["type"] == "input_audio_buffer.timeout_triggered"]
    assert [(t["audio_start_ms"], t["audio_end_ms"]) for t in timeouts] == [(0, 1000), (1000, 2000)]
    kinds = [e["type"] for e in sender.events[1:6]]  # after session.updated
    assert kinds == ["input_audio_buffer.timeout_triggered", "input_audio_buffer.committed", "conversation.item.added",
                     "conversation.item.input_audio_transcription.completed", "conversation.item.done"]
    assert sender.events[4]["transcript"] == "" and not service.streams  # no engine request for silence


class FakeSocket:
    """What EventSender needs of a WebSocket; `fail` makes sends raise (a dropped client)."""

    def __init__(self, fail: bool = False) -> None:
        from starlette.websockets import WebSocketState

        self.application_state = WebSocketState.CONNECTED
        self.sent: list[dict[str, Any]] = []
        self.fail = fail

    async def send_text(self, text: str) -> None:
        if self.fail:
            raise ConnectionResetError("gone")
        self.sent.append(json.loads(text))


async def test_a_resumed_connection_gets_every_later_event_exactly_once() -> None:
    first = FakeSocket()
    sender = EventSender(first, replay=100)  # type: ignore[arg-type]
    events = [server_event("e", n=i) for i in range(6)]
    for e in events[:3]:
        await sender.send(e)
    first.fail = True  # dropped: events 3.. are only logged
    for e in events[3:5]:
        await sender.send(e)
    assert sender.detach(first)  # type: ignore[arg-type]
    await sender.send(events[5])
    second = FakeSocket()
    await sender.attach(second, events[1]["event_id"], lambda n: server_event("session.resumed", replayed=n))  # type: ignore[arg-type]
    assert [e.get("n") for e in second.sent] == [None, 2, 3, 4, 5] and second.sent[0]["replayed"] == 4
    # resuming after the greeting means: after the event it was sent for (what it replayed may be lost)
    third = FakeSocket()
    old = await sender.attach(third, second.sent[0]["event_id"], lambda n: server_event("session.resumed", replayed=n))  # type: ignore[arg-type]
    assert old is second and [e.get("n") for e in third.sent] == [None, 2, 3, 4, 5]
    assert not sender.knows("event_nope")
    small = EventSender(FakeSocket(), replay=2)  # type: ignore[arg-type]
    for e in events:
        await small.send(e)
    assert not small.knows(events[3]["event_id"]) and small.knows(events[4]["event_id"])


async def test_a_long_close_reason_is_cut_to_fit_the_close_frame() -> None:
    """Starlette sends the reason as given; over 123 bytes the close frame itself fails (the client
    then sees 1006 and no reason at all)."""
    closes: list[tuple[int, str]] = []

    class ClosingSocket(FakeSocket):
        async def close(self, code: int, reason: str) -> None:
            closes.append((code, reason))

    sender = EventSender(ClosingSocket())  # type: ignore[arg-type]
    await sender.close(1008, "language is not supported by the nemo model 'x': " + "é" * 100)
    [(code, reason)] = closes
    assert code == 1008 and reason.startswith("language is not supported") and reason.endswith("...")
    assert len(reason.encode()) <= 123
