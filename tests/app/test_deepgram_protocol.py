"""Deepgram's live protocol without a server: query parameters (served, ignored, refused), the
audio front (headerless, containers, refusals), and message shapes checked against the
official `deepgram-sdk`'s own pydantic types."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deepgram.listen.v1.types.listen_v1error import ListenV1Error
from deepgram.listen.v1.types.listen_v1metadata import ListenV1Metadata
from deepgram.listen.v1.types.listen_v1results import ListenV1Results
from deepgram.listen.v1.types.listen_v1speech_started import ListenV1SpeechStarted
from deepgram.listen.v1.types.listen_v1utterance_end import ListenV1UtteranceEnd

from app.audio import AudioDecodeError
from app.deepgram import messages as msg
from app.deepgram.audio import ListenAudio
from app.deepgram.params import MIN_ENDPOINTING_MS, ListenParams, QueryError, parse_params
from app.live.sender import MAX_REASON_BYTES, close_reason
from engine import Word
from tests.audio_variants import encode_variant

SDK_TYPES = {"Results": ListenV1Results, "Metadata": ListenV1Metadata, "SpeechStarted": ListenV1SpeechStarted,
             "UtteranceEnd": ListenV1UtteranceEnd, "Error": ListenV1Error}
MODEL = msg.ModelIdentity(name="tiny.en", version="1.2.3", arch="whisper")
DEFAULT_SILENCE_MS = 500


def validate(message: dict[str, Any]) -> None:
    """A server message must parse as the SDK's own type for it, with no type coercion."""
    SDK_TYPES[message["type"]].model_validate(message, strict=True)


def parse(query: str) -> ListenParams:
    pairs = [tuple(p.split("=", 1)) for p in query.split("&") if p]
    return parse_params(pairs, DEFAULT_SILENCE_MS)  # type: ignore[arg-type]


# ---------------------------------------------------------------- query parameters


def test_defaults_are_deepgrams_with_the_servers_endpointing() -> None:
    p = parse("")
    assert p == ListenParams(endpointing_ms=DEFAULT_SILENCE_MS)
    assert not p.needs_vad and not p.formatted and p.encoding is None


def test_what_the_sdk_sends_for_a_voice_agent() -> None:
    p = parse("model=nova-3&encoding=linear16&sample_rate=16000&channels=2&interim_results=true&endpointing=300"
              "&utterance_end_ms=1000&vad_events=True&smart_format=true&punctuate=false&language=en-US"
              "&keywords=Kubernetes:2&keyterm=tensor cores&profanity_filter=true&tag=a&tag=b&mip_opt_out=true")
    assert p == ListenParams(encoding="linear16", sample_rate=16000, channels=2, interim_results=True,
                             endpointing_ms=300, endpointing_given=True, utterance_end_ms=1000, vad_events=True,
                             smart_format=True, language="en", keywords=("Kubernetes", "tensor cores"))
    assert p.formatted and p.needs_vad


CLIENT_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "clients"


@pytest.mark.parametrize("fixture", ["livekit_plugins_deepgram.json", "pipecat_deepgram.json"])
def test_the_query_strings_integrations_send_are_accepted(fixture: str) -> None:
    """The exact query strings livekit-plugins-deepgram and pipecat's DeepgramSTTService send
    (recorded from the installed libraries, tests/fixtures/clients/record/), parsed as served."""
    recorded = json.loads((CLIENT_FIXTURES / fixture).read_text())
    for case in recorded["cases"].values():
        for connection in case["connections"]:
            pairs = [tuple(pair) for pair in connection["query"]]
            p = parse_params(pairs, DEFAULT_SILENCE_MS)  # type: ignore[arg-type]
            query = dict(pairs)
            assert (p.encoding, p.sample_rate, p.interim_results) == ("linear16", 16000, True), recorded["library"]
            assert p.language == "en"
            if query.get("endpointing") == "false":
                assert p.endpointing_ms is None
            elif "endpointing" in query:  # livekit's 25 ms is raised to the shortest segment end served
                assert p.endpointing_ms == MIN_ENDPOINTING_MS


@pytest.mark.parametrize(("value", "expected"), [("false", None), ("true", DEFAULT_SILENCE_MS), ("800", 800),
                                                 ("10", MIN_ENDPOINTING_MS), ("0", MIN_ENDPOINTING_MS)])
def test_endpointing(value: str, expected: int | None) -> None:
    p = parse(f"endpointing={value}")
    assert p.endpointing_ms == expected and p.endpointing_given
    assert p.needs_vad == (expected is not None)


def test_keywords_drop_boosts_and_repeats() -> None:
    p = parse("keywords=snuffleupagus:5&keywords=kubectl&keywords=kubectl:1.5&keyterm=Elon Musk")
    assert p.keywords == ("snuffleupagus", "kubectl", "Elon Musk")


@pytest.mark.parametrize(("query", "words"), [
    ("encoding=mp3", "unknown encoding"),
    ("encoding=linear32&sample_rate=16000", "not supported"),
    ("encoding=linear16", "sample_rate is required"),
    ("encoding=mulaw&sample_rate=100", "sample_rate must be from"),
    ("encoding=linear16&sample_rate=16k", "sample_rate must be an integer"),
    ("channels=0", "channels must be from 1"),
    ("interim_results=yes", "interim_results must be true or false"),
    ("endpointing=soon", "endpointing must be an integer"),
    ("endpointing=-5", "endpointing must be from 0"),
    ("utterance_end_ms=1000", "needs interim_results=true"),
    ("interim_results=true&utterance_end_ms=0", "utterance_end_ms must be from 1"),
    ("language=english!", "BCP-47"),
    ("diarize=true", "diarization is not supported"),
    ("redact=pci", "redaction is not supported"),
    ("callback=http://x", "callbacks"),
    ("interim_result=true", "unknown query parameter 'interim_result'"),
    ("sample_rate=8000&sample_rate=16000", "given 2 times"),
    ("keywords=spam:-10", "suppress"),
    ("keyterm=", "must not be empty"),
])
def test_bad_parameters_are_refused_with_a_reason(query: str, words: str) -> None:
    with pytest.raises(QueryError, match=words):
        parse(query)


def test_features_turned_off_are_accepted() -> None:
    assert parse("diarize=false&multichannel=false&dictation=false") == parse("")


def test_language_multi_and_tags() -> None:
    assert parse("language=multi").language is None
    assert parse("language=pt-BR").language == "pt"


def test_close_reason_fits_a_close_frame() -> None:
    reason = close_reason("INVALID_QUERY: " + "é" * 200)
    assert len(reason.encode()) <= MAX_REASON_BYTES and reason.endswith("...")
    assert close_reason("short") == "short"


# ---------------------------------------------------------------- messages


def test_plain_words_lose_case_and_outer_punctuation_only() -> None:
    assert msg.plain_text("Hello, world! Don't stop; well-known \"U.S.\" 1,000.") == \
        "hello world don't stop well-known u.s 1,000"
    assert msg.plain_word("...") == ""


def test_results_shape_and_word_times() -> None:
    words = [Word(" Hello,", 0.1, 0.5, 0.91), Word(" -", 0.5, 0.5, 0.2), Word(" world.", 0.6, 1.0, 0.8)]
    rendered = msg.render_words(words, offset=2.0, formatted=True)
    assert rendered == [
        {"word": "hello", "start": 2.1, "end": 2.5, "confidence": 0.91, "punctuated_word": "Hello,"},
        {"word": "world", "start": 2.6, "end": 3.0, "confidence": 0.8, "punctuated_word": "world."},
    ]
    assert "punctuated_word" not in msg.render_words(words, 0.0, formatted=False)[0]
    results = msg.results(request_id="r", model=MODEL, start=2.0, duration=1.25, transcript="Hello, world.",
                          confidence=0.855, words=rendered, is_final=True, speech_final=True, from_finalize=False)
    validate(results)
    assert results["channel_index"] == [0, 1] and results["metadata"]["model_info"] == MODEL.info()
    assert results["metadata"]["model_uuid"] == MODEL.uuid


def test_event_messages_validate_against_the_sdk() -> None:
    for message in (msg.speech_started(1.5), msg.utterance_end(2.25), msg.error("bad", "SchemaError", "{}"),
                    msg.metadata(request_id="r", model=MODEL, sha256="0" * 64, created="2024-01-01T00:00:00.000Z",
                                 duration=3.5, channels=1)):
        validate(message)


# ---------------------------------------------------------------- the audio front


async def push_all(audio: ListenAudio, body: bytes, piece: int) -> np.ndarray:
    parts = [await audio.push(body[i : i + piece]) for i in range(0, len(body), piece)]
    parts.append(await audio.flush())
    audio.close()
    return np.concatenate(parts)


async def test_linear16_in_odd_pieces() -> None:
    pcm = (np.linspace(-0.5, 0.5, 16000) * 32767).astype("<i2").tobytes()
    out = await push_all(ListenAudio(parse("encoding=linear16&sample_rate=16000"), 16000), pcm, 333)
    assert out.size == 16000


async def test_a_stream_shorter_than_the_sniffing_window_is_decoded_at_the_end() -> None:
    audio = ListenAudio(parse("encoding=mulaw&sample_rate=8000"), 16000)
    assert (await audio.push(b"\xff" * 10)).size == 0
    assert (await audio.flush()).size == 20


async def test_a_wav_header_under_linear16_is_read_as_the_file_it_is() -> None:
    tone = np.sin(np.arange(8000) / 8).astype(np.float32) * 0.3
    wav = encode_variant(tone, 8000, "wav")
    audio = ListenAudio(parse("encoding=linear16&sample_rate=44100"), 16000)  # the header's 8 kHz wins
    out = await push_all(audio, wav, 4096)
    assert abs(out.size - 16000) <= 2 and audio.format == "wav/pcm_s16le"


@pytest.mark.parametrize(("query", "fmt", "words"), [
    ("encoding=linear16&sample_rate=16000", "webm_opus", "is a webm file, but encoding=linear16"),
    ("encoding=opus", "wav", "is a wav file; expected ogg or webm"),
    ("", "linear16", "not a container this server recognises; expected webm or ogg"),
])
async def test_audio_that_is_not_what_was_declared_is_refused(query: str, fmt: str, words: str) -> None:
    body = encode_variant(np.zeros(8000, dtype=np.float32) + 0.01, 16000, fmt)
    with pytest.raises(AudioDecodeError, match=words):
        await push_all(ListenAudio(parse(query), 16000), body, 4096)


@pytest.mark.parametrize("query", ["", "encoding=opus", "encoding=ogg-opus&sample_rate=48000"])
async def test_opus_in_webm_and_ogg(query: str) -> None:
    tone = (np.sin(np.arange(32000) / 5) * 0.3).astype(np.float32)
    for fmt in ("webm_opus", "ogg_opus"):
        audio = ListenAudio(parse(query), 16000)
        out = await push_all(audio, encode_variant(tone, 16000, fmt), 1500)
        assert abs(out.size - 32000) <= 2 and audio.format.endswith("/opus")
    await asyncio.sleep(0)


def test_deepgram_ways_of_presenting_the_key() -> None:
    from app.middleware import presented_keys

    def keys(*headers: tuple[bytes, bytes]) -> list[str]:
        return presented_keys({"headers": list(headers)})

    assert keys((b"authorization", b"Token abc")) == ["abc"]
    assert keys((b"authorization", b"bearer xyz")) == ["xyz"]
    assert keys((b"sec-websocket-protocol", b"token, k1")) == ["k1"]
    assert keys((b"sec-websocket-protocol", b"realtime, openai-insecure-api-key.k2")) == ["k2"]
    assert keys((b"sec-websocket-protocol", b"token"), (b"authorization", b"Basic abc")) == []
