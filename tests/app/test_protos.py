"""The gRPC schema: checked-in stubs match the .proto, messages round-trip, a real grpc.aio call works."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from protos import generate
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc as pb_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]


def _checked_in_stubs() -> list[Path]:
    return sorted(p for p in generate.PROTO_ROOT.rglob("*_pb2*.py*") if p.suffix in (".py", ".pyi"))


def _serialized_descriptor(pb2_source: str) -> bytes:
    """The FileDescriptorProto bytes a generated _pb2 module registers, read from its source text."""
    match = re.search(r"AddSerializedFile\((b'.*?')\)\n", pb2_source, re.DOTALL)
    assert match, "generated _pb2 module has no AddSerializedFile(...) call"
    value = ast.literal_eval(match.group(1))
    assert isinstance(value, bytes)
    return value


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("protos")
    generate.generate(out)
    return out


def test_checked_in_descriptor_matches_proto(regenerated: Path) -> None:
    """Independent of the protoc version: the schema compiled into speech_pb2 is the .proto's schema."""
    fresh = _serialized_descriptor((regenerated / "oasr/speech/v1/speech_pb2.py").read_text())
    assert fresh == pb.DESCRIPTOR.serialized_pb, (
        "protos/oasr/speech/v1/speech.proto changed without regenerating: run `make protos` and commit the stubs"
    )


def test_checked_in_stubs_are_byte_identical_to_regeneration(regenerated: Path) -> None:
    fresh = sorted(p.relative_to(regenerated) for p in regenerated.rglob("*") if p.is_file())
    checked_in = [p.relative_to(generate.PROTO_ROOT) for p in _checked_in_stubs()]
    assert fresh == checked_in, "stale or missing stubs under protos/: run `make protos`"
    for rel in fresh:
        assert (regenerated / rel).read_bytes() == (generate.PROTO_ROOT / rel).read_bytes(), (
            f"protos/{rel} differs from what `make protos` writes; regenerate with the grpcio-tools "
            "version pinned in pyproject.toml and commit"
        )


def test_grpc_module_imports_its_messages_relatively() -> None:
    source = (generate.PROTO_ROOT / "oasr/speech/v1/speech_pb2_grpc.py").read_text()
    assert "from . import speech_pb2 as " in source
    assert "from oasr." not in source


def test_stubs_import_from_outside_the_repository(tmp_path: Path) -> None:
    """Only the project root on sys.path (as with `pip install -e .`), not protos/ and not the cwd."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    code = "from protos.oasr.speech.v1 import speech_pb2_grpc; print(speech_pb2_grpc.SpeechStub.__name__)"
    result = subprocess.run(
        [sys.executable, "-P", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "SpeechStub"


# Field numbers of Google Cloud Speech-to-Text v1 that this schema keeps, so messages map one to one.
GOOGLE_V1_FIELD_NUMBERS = {
    pb.RecognizeRequest: {"config": 1, "audio": 2},
    pb.RecognitionAudio: {"content": 1, "uri": 2},
    pb.RecognitionConfig: {
        "encoding": 1,
        "sample_rate_hertz": 2,
        "language_code": 3,
        "max_alternatives": 4,
        "audio_channel_count": 7,
        "enable_word_time_offsets": 8,
        "enable_automatic_punctuation": 11,
        "enable_separate_recognition_per_channel": 12,
        "model": 13,
        "enable_word_confidence": 15,
    },
    pb.RecognizeResponse: {"results": 2, "total_billed_time": 3},
    pb.SpeechRecognitionResult: {"alternatives": 1, "channel_tag": 2, "result_end_time": 4, "language_code": 5},
    pb.SpeechRecognitionAlternative: {"transcript": 1, "confidence": 2, "words": 3},
    pb.WordInfo: {"start_time": 1, "end_time": 2, "word": 3, "confidence": 4},
    pb.StreamingRecognizeRequest: {"streaming_config": 1, "audio_content": 2},
    pb.StreamingRecognitionConfig: {
        "config": 1,
        "single_utterance": 2,
        "interim_results": 3,
        "enable_voice_activity_events": 5,
    },
    pb.StreamingRecognizeResponse: {
        "error": 1,
        "results": 2,
        "speech_event_type": 4,
        "total_billed_time": 5,
        "speech_event_time": 8,
    },
    pb.StreamingRecognitionResult: {
        "alternatives": 1,
        "is_final": 2,
        "stability": 3,
        "result_end_time": 4,
        "channel_tag": 5,
        "language_code": 6,
    },
    pb.Status: {"code": 1, "message": 2},
    pb.LongRunningRecognizeRequest: {"config": 1, "audio": 2},
    pb.LongRunningRecognizeResponse: {"results": 2, "total_billed_time": 3},
    pb.LongRunningRecognizeMetadata: {"progress_percent": 1, "start_time": 2, "last_update_time": 3, "uri": 4},
}


@pytest.mark.parametrize("message", list(GOOGLE_V1_FIELD_NUMBERS), ids=lambda m: m.DESCRIPTOR.name)
def test_field_numbers_follow_google_v1(message: type) -> None:
    fields = message.DESCRIPTOR.fields_by_name  # type: ignore[attr-defined]
    assert {name: fields[name].number for name in GOOGLE_V1_FIELD_NUMBERS[message]} == (
        GOOGLE_V1_FIELD_NUMBERS[message]
    )


def test_enum_values_follow_google_v1() -> None:
    enc = pb.RecognitionConfig.AudioEncoding
    assert [enc.Value(n) for n in ("ENCODING_UNSPECIFIED", "LINEAR16", "FLAC", "MULAW")] == [0, 1, 2, 3]
    assert [enc.Value(n) for n in ("OGG_OPUS", "MP3", "WEBM_OPUS")] == [6, 8, 9]
    assert {"WAV", "LINEAR32F", "AUTO", "ALAW"} <= set(enc.keys())
    assert "AMR" not in enc.keys()  # noqa: SIM118 (an EnumTypeWrapper is not a dict)
    event = pb.StreamingRecognizeResponse.SpeechEventType
    assert [event.Value(n) for n in ("END_OF_SINGLE_UTTERANCE", "SPEECH_ACTIVITY_BEGIN", "SPEECH_ACTIVITY_END")] == [
        1,
        2,
        3,
    ]


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def test_messages_round_trip_through_the_wire_format() -> None:
    config = pb.RecognitionConfig(
        encoding=pb.RecognitionConfig.LINEAR32F,
        sample_rate_hertz=16000,
        language_code="en-US",
        max_alternatives=3,
        enable_word_time_offsets=True,
        decoding=pb.DecodingExtensions(beam_size=5, temperature=0.2, task=pb.DecodingExtensions.TRANSLATE, seed=0),
        request_id="req-1",
    )
    request = pb.RecognizeRequest(config=config, audio=pb.RecognitionAudio(content=b"\x00\x01" * 10))
    parsed = pb.RecognizeRequest.FromString(request.SerializeToString())
    assert parsed == request
    assert parsed.audio.WhichOneof("audio_source") == "content"
    assert parsed.config.decoding.HasField("seed") and parsed.config.decoding.seed == 0
    assert not pb.DecodingExtensions().HasField("seed")

    word = pb.WordInfo(start_time=_duration(0.5), end_time=_duration(0.92), word="hello", confidence=0.9)
    response = pb.RecognizeResponse(
        results=[
            pb.SpeechRecognitionResult(
                alternatives=[pb.SpeechRecognitionAlternative(transcript="hello", confidence=0.8, words=[word])],
                result_end_time=_duration(1.25),
                language_code="en-us",
            )
        ],
        total_billed_time=_duration(1.25),
        request_id=7,
        oasr_request_id="req-1",
    )
    parsed_response = pb.RecognizeResponse.FromString(response.SerializeToString())
    assert parsed_response == response
    assert parsed_response.results[0].alternatives[0].words[0].end_time.ToNanoseconds() == 920_000_000

    audio = pb.RecognitionAudio(content=b"abc")
    audio.uri = "gs://bucket/clip.flac"  # setting the other member of the oneof clears content
    assert audio.WhichOneof("audio_source") == "uri" and audio.content == b""


class _EchoSpeech(pb_grpc.SpeechServicer):
    """A test servicer: reports byte counts instead of transcripts."""

    async def Recognize(self, request: pb.RecognizeRequest, context: grpc.aio.ServicerContext) -> pb.RecognizeResponse:
        if request.audio.WhichOneof("audio_source") != "content":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "only inline content is supported")
        alternative = pb.SpeechRecognitionAlternative(transcript=f"{len(request.audio.content)} bytes")
        return pb.RecognizeResponse(
            results=[pb.SpeechRecognitionResult(alternatives=[alternative])],
            oasr_request_id=request.config.request_id
        )

    async def StreamingRecognize(
        self, request_iterator: AsyncIterator[pb.StreamingRecognizeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamingRecognizeResponse]:
        first = await anext(request_iterator)
        request_id = first.streaming_config.config.request_id
        total = 0
        async for req in request_iterator:
            total += len(req.audio_content)
            interim = pb.StreamingRecognitionResult(
                alternatives=[pb.SpeechRecognitionAlternative(transcript=str(total))], is_final=False
            )
            yield pb.StreamingRecognizeResponse(results=[interim], oasr_request_id=request_id)
        final = pb.StreamingRecognitionResult(
            alternatives=[pb.SpeechRecognitionAlternative(transcript=str(total))], is_final=True
        )
        yield pb.StreamingRecognizeResponse(
            results=[final],
            speech_event_type=pb.StreamingRecognizeResponse.END_OF_SINGLE_UTTERANCE,
            oasr_request_id=request_id,
        )


async def test_grpc_aio_server_and_channel_smoke() -> None:
    server = grpc.aio.server()
    pb_grpc.add_SpeechServicer_to_server(_EchoSpeech(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.SpeechStub(channel)

            response = await stub.Recognize(
                pb.RecognizeRequest(
                    config=pb.RecognitionConfig(request_id="r1"), audio=pb.RecognitionAudio(content=b"x" * 7)
                ),
                timeout=10,
            )
            assert response.oasr_request_id == "r1"
            assert response.results[0].alternatives[0].transcript == "7 bytes"

            with pytest.raises(grpc.aio.AioRpcError) as excinfo:
                await stub.Recognize(pb.RecognizeRequest(audio=pb.RecognitionAudio(uri="gs://b/o")), timeout=10)
            assert excinfo.value.code() == grpc.StatusCode.INVALID_ARGUMENT

            async def requests() -> AsyncIterator[pb.StreamingRecognizeRequest]:
                config = pb.StreamingRecognitionConfig(
                    config=pb.RecognitionConfig(request_id="s1"), interim_results=True
                )
                yield pb.StreamingRecognizeRequest(streaming_config=config)
                for size in (3, 4, 5):
                    yield pb.StreamingRecognizeRequest(audio_content=b"\x00" * size)

            responses = [r async for r in stub.StreamingRecognize(requests(), timeout=10)]
    finally:
        await server.stop(grace=None)

    assert [r.results[0].alternatives[0].transcript for r in responses] == ["3", "7", "12", "12"]
    assert [r.results[0].is_final for r in responses] == [False, False, False, True]
    assert {r.oasr_request_id for r in responses} == {"s1"}
    assert responses[-1].speech_event_type == pb.StreamingRecognizeResponse.END_OF_SINGLE_UTTERANCE
