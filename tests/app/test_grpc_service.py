"""The gRPC layer without a model: proto <-> engine conversions, the status-code table, the
live PCM chunker, and the listener's health following readiness and the drain.

End-to-end behaviour against a real server and model is in tests/e2e/test_grpc*.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from app.admission import Refused
from app.audio import AudioEncoding, AudioTooLongError, decode_audio
from app.errors import ApiError
from app.google.convert import (
    AudioSpec,
    audio_spec,
    billed,
    decoding_options,
    recognize_response,
)
from app.grpc.audio import PcmChunker
from app.grpc.convert import RpcError, to_rpc_error
from app.grpc.service import SERVICE_NAME, start_grpc_server
from app.grpc.speech import GrpcDeps
from app.live import VadModelCache
from app.metrics import Metrics
from app.settings import Settings
from engine import RequestOutput
from engine.errors import EngineShutdownError, InvalidRequestError
from engine.types import Alternative, Word
from protos.oasr.speech.v1 import speech_pb2 as pb

REPO_ROOT = Path(__file__).resolve().parents[2]

Enc = pb.RecognitionConfig.AudioEncoding
Code = grpc.StatusCode


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [(Enc.ENCODING_UNSPECIFIED, AudioEncoding.AUTO), (Enc.AUTO, AudioEncoding.AUTO), (Enc.FLAC, AudioEncoding.FLAC),
     (Enc.WAV, AudioEncoding.WAV), (Enc.OGG_OPUS, AudioEncoding.OGG_OPUS), (Enc.MP3, AudioEncoding.MP3),
     (Enc.WEBM_OPUS, AudioEncoding.WEBM_OPUS)],
)
def test_container_encodings_map_without_a_rate(encoding: int, expected: AudioEncoding) -> None:
    spec = audio_spec(pb.RecognitionConfig(encoding=encoding))
    assert spec == AudioSpec(expected, None, 1)


@pytest.mark.parametrize("encoding", [Enc.LINEAR16, Enc.LINEAR32F, Enc.MULAW, Enc.ALAW])
def test_headerless_encodings_need_a_rate(encoding: int) -> None:
    with pytest.raises(InvalidRequestError) as err:
        audio_spec(pb.RecognitionConfig(encoding=encoding))
    assert to_rpc_error(err.value, draining=False).code == Code.INVALID_ARGUMENT and "sample_rate_hertz is required" in str(err.value)
    spec = audio_spec(pb.RecognitionConfig(encoding=encoding, sample_rate_hertz=8000, audio_channel_count=2))
    assert (spec.sample_rate, spec.channels) == (8000, 2)


@pytest.mark.parametrize("field", ["sample_rate_hertz", "audio_channel_count"])
def test_negative_rate_or_channels_rejected(field: str) -> None:
    with pytest.raises(InvalidRequestError, match=field):
        audio_spec(pb.RecognitionConfig(**{"encoding": Enc.LINEAR16, "sample_rate_hertz": 16000, field: -1}))


def test_unknown_encoding_number_rejected() -> None:
    with pytest.raises(InvalidRequestError, match="not a known AudioEncoding"):
        audio_spec(pb.RecognitionConfig(encoding=57))


@pytest.mark.parametrize(("code", "iso"), [("en-US", "en"), ("pt_BR", "pt"), ("DE", "de"), ("yue-Hant-HK", "yue"),
                                           ("", None), ("  ", None)])
def test_language_code_bcp47_to_primary_subtag(code: str, iso: str | None) -> None:
    assert decoding_options(pb.RecognitionConfig(language_code=code)).language == iso


@pytest.mark.parametrize("code", ["e1", "x", "english-US", "-US"])
def test_bad_language_code_rejected(code: str) -> None:
    with pytest.raises(InvalidRequestError, match="language_code"):
        decoding_options(pb.RecognitionConfig(language_code=code))


def test_max_alternatives_turns_on_beam_search() -> None:
    opts = decoding_options(pb.RecognitionConfig(max_alternatives=3))
    assert (opts.beam_size, opts.n_best) == (3, 3)
    opts = decoding_options(pb.RecognitionConfig(max_alternatives=2, decoding=pb.DecodingExtensions(beam_size=5)))
    assert (opts.beam_size, opts.n_best) == (5, 2)
    opts = decoding_options(pb.RecognitionConfig(max_alternatives=1))
    assert (opts.beam_size, opts.n_best) == (1, 1)


def test_decoding_extensions_map_to_options() -> None:
    config = pb.RecognitionConfig(
        language_code="en-GB", enable_word_confidence=True,
        decoding=pb.DecodingExtensions(temperature=0.4, prompt="Glossary: OASR.", task=pb.DecodingExtensions.TRANSLATE,
                                       top_k=5, top_p=0.9, max_new_tokens=50, seed=0),
    )
    opts = decoding_options(config)
    assert opts.language == "en" and opts.task == "translate" and opts.word_timestamps
    assert opts.temperature == pytest.approx(0.4) and opts.top_p == pytest.approx(0.9)
    assert (opts.prompt, opts.top_k, opts.max_new_tokens, opts.seed) == ("Glossary: OASR.", 5, 50, 0)
    unset = decoding_options(pb.RecognitionConfig())
    assert (unset.seed, unset.top_k, unset.top_p, unset.prompt, unset.language) == (None, None, None, None, None)


def test_speech_contexts_become_keywords_and_the_window_passes_through() -> None:
    config = pb.RecognitionConfig(
        speech_contexts=[pb.SpeechContext(phrases=["Kubernetes", "OASR"]), pb.SpeechContext(phrases=["Parakeet"])],
        decoding=pb.DecodingExtensions(stream_context=pb.StreamContext(left=70, chunk=2, right=2), delay="low"),
    )
    opts = decoding_options(config)
    assert opts.keywords == ("Kubernetes", "OASR", "Parakeet")
    assert (opts.stream_context, opts.delay) == ((70, 2, 2), "low")
    unset = decoding_options(pb.RecognitionConfig())
    assert (unset.keywords, unset.stream_context, unset.delay) == ((), None, None)
    with pytest.raises(InvalidRequestError) as err:
        decoding_options(pb.RecognitionConfig(decoding=pb.DecodingExtensions(delay="instant")))
    assert to_rpc_error(err.value, draining=False).code == Code.INVALID_ARGUMENT

@pytest.mark.parametrize("ext", [pb.DecodingExtensions(temperature=3.0), pb.DecodingExtensions(top_p=1.5),
                                 pb.DecodingExtensions(beam_size=99), pb.DecodingExtensions(max_new_tokens=-2)])
def test_bad_decoding_values_are_invalid_argument(ext: pb.DecodingExtensions) -> None:
    with pytest.raises(InvalidRequestError) as err:
        decoding_options(pb.RecognitionConfig(decoding=ext))
    assert to_rpc_error(err.value, draining=False).code == Code.INVALID_ARGUMENT


# ----------------------------------------------------------------------------- status codes


@pytest.mark.parametrize(
    ("exc", "draining", "code"),
    [
        (AudioTooLongError("too long"), False, Code.RESOURCE_EXHAUSTED),
        (InvalidRequestError("bad"), False, Code.INVALID_ARGUMENT),
        (EngineShutdownError("down"), False, Code.UNAVAILABLE),
        (ApiError(503, "at capacity"), False, Code.RESOURCE_EXHAUSTED),
        (ApiError(503, "shutting down"), True, Code.UNAVAILABLE),
        (ApiError(408, "timeout"), False, Code.DEADLINE_EXCEEDED),
        (ApiError(404, "no such model"), False, Code.NOT_FOUND),
        (ApiError(500, "boom"), False, Code.INTERNAL),
        (Refused("server is overloaded", 10), False, Code.RESOURCE_EXHAUSTED),
        (Refused("server is shutting down", None), False, Code.UNAVAILABLE),
    ],
)
def test_errors_map_to_status_codes(exc: Exception, draining: bool, code: grpc.StatusCode) -> None:
    err = to_rpc_error(exc, draining=draining)
    assert err.code == code and err.message
    if isinstance(exc, Refused) and exc.retry_after is not None:
        assert err.trailing_metadata == (("grpc-retry-pushback-ms", "10000"),)


def test_unknown_exceptions_are_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        to_rpc_error(ZeroDivisionError(), draining=False)


# ----------------------------------------------------------------------------- results


def _output() -> RequestOutput:
    return RequestOutput(
        request_id="r", text=" Hello world.", finished=True, finish_reason="stop", duration=2.25, language="en",
        words=[Word(" Hello", 0.1, 0.5, 0.9), Word(" world.", 0.6, 1.2, 0.8)],
        nbest=[Alternative(" Hello world.", 0.7), Alternative(" Hello word.", 0.2), Alternative(" Yellow world.", 0.1)],
    )


def test_recognize_response_words_alternatives_and_billing() -> None:
    config = pb.RecognitionConfig(enable_word_time_offsets=True, enable_word_confidence=True, max_alternatives=2)
    resp = recognize_response(_output(), config, "rid-1")
    assert resp.oasr_request_id == "rid-1" and resp.request_id > 0 and resp.total_billed_time.seconds == 3
    (result,) = resp.results
    assert result.result_end_time.ToNanoseconds() == 2_250_000_000 and result.language_code == "en"
    assert [a.transcript for a in result.alternatives] == ["Hello world.", "Hello word."]
    assert result.alternatives[0].confidence == pytest.approx(0.7)
    words = result.alternatives[0].words
    assert [w.word for w in words] == ["Hello", "world."]
    assert words[1].start_time.ToNanoseconds() == 600_000_000 and words[1].end_time.ToNanoseconds() == 1_200_000_000
    assert words[0].confidence == pytest.approx(0.9)


def test_words_only_when_asked_and_confidence_only_when_asked() -> None:
    plain = recognize_response(_output(), pb.RecognitionConfig(), "r").results[0]
    assert len(plain.alternatives) == 1 and not plain.alternatives[0].words
    timed = recognize_response(_output(), pb.RecognitionConfig(enable_word_time_offsets=True), "r").results[0]
    assert timed.alternatives[0].words[0].confidence == 0.0


def test_silence_gives_no_result_but_is_billed() -> None:
    resp = recognize_response(RequestOutput(request_id="r", finished=True, duration=0.4), pb.RecognitionConfig(), "r")
    assert not resp.results and billed(0.4).seconds == 1 and resp.total_billed_time.seconds == 1


# ----------------------------------------------------------------------------- live PCM


@pytest.mark.parametrize(("encoding", "rate", "channels"), [("LINEAR16", 8000, 1), ("LINEAR32F", 48000, 2),
                                                            ("MULAW", 8000, 1), ("ALAW", 16000, 2)])
def test_pcm_chunker_cut_anywhere_matches_whole_decode(encoding: str, rate: int, channels: int) -> None:
    rng = np.random.default_rng(0)
    wave = (0.3 * np.sin(np.arange(rate) * 2 * np.pi * 440 / rate)[:, None] * np.ones(channels)).astype(np.float32)
    wave += 0.01 * rng.standard_normal(wave.shape).astype(np.float32)
    from tests.audio_variants import encode_variant

    body = encode_variant(wave if channels > 1 else wave[:, 0], rate, encoding.lower(), channels=channels)
    spec = AudioSpec(AudioEncoding(encoding), rate, channels)
    chunker = PcmChunker(spec, 16000, Settings())
    cuts = sorted(rng.choice(np.arange(1, len(body)), size=40, replace=False))
    pieces = [chunker.push(body[a:b]) for a, b in zip([0, *cuts], [*cuts, len(body)])]
    live = np.concatenate([*pieces, chunker.flush()])
    whole = decode_audio(body, encoding=encoding, sample_rate=rate, channels=channels).samples
    assert len(live) == len(whole)
    np.testing.assert_allclose(live, whole, atol=1e-5)


def test_pcm_chunker_stray_bytes_at_the_end() -> None:
    chunker = PcmChunker(AudioSpec(AudioEncoding.LINEAR16, 16000, 1), 16000, Settings())
    chunker.push(b"\x00" * 3201)
    with pytest.raises(Exception, match="inside a frame"):
        chunker.flush()


def test_pcm_chunker_enforces_max_audio_seconds() -> None:
    chunker = PcmChunker(AudioSpec(AudioEncoding.LINEAR16, 16000, 1), 16000, Settings(max_audio_seconds=1.0))
    chunker.push(b"\x00" * 32000)  # exactly 1 s
    with pytest.raises(RpcError) as err:
        chunker.push(b"\x00" * 2)
    assert err.value.code == Code.RESOURCE_EXHAUSTED and "--max-audio-seconds" in err.value.message


# ----------------------------------------------------------------------------- health


class _Readiness:
    """Stands in for EngineService: only `.ready` is read by the health task."""

    ready = True


async def test_a_vad_model_that_failed_to_load_refuses_vad_streams_and_is_not_retried() -> None:
    from app.grpc.live import LiveCall
    from app.live import VadModelCache
    from tests.app.bridge_double import ScriptedService

    vad_models = VadModelCache("no-such-vad")
    config = pb.StreamingRecognitionConfig(config=pb.RecognitionConfig(encoding=Enc.LINEAR16, sample_rate_hertz=16000),
                                           enable_voice_activity_events=True)
    spec = AudioSpec(AudioEncoding.LINEAR16, 16000, 1)

    async def audio() -> Any:
        yield b"\0\0" * 1600

    for _ in range(2):
        call = LiveCall(ScriptedService(), Settings(), config, spec, decoding_options(config.config), "r1",  # type: ignore[arg-type]
                        vad_models)
        with pytest.raises(RpcError) as err:
            await anext(call.run(audio()))
        assert err.value.code == Code.INTERNAL and "no-such-vad" in err.value.message
        assert "unknown VAD model" in err.value.message
        vad_models.kind = "energy"  # would load now: the second call shows the failure is remembered


def test_health_follows_readiness_and_the_drain(unused_tcp_port: int) -> None:
    """Runs in a child process with its own event loop: grpc's asyncio server, started and
    stopped on one of pytest-asyncio's per-test loops, crashed the whole test run once
    (a segfault in `server.stop`, grpc/grpc#31441)."""
    code = "import asyncio, sys; from tests.app.test_grpc_service import check_health; " \
           "asyncio.run(check_health(int(sys.argv[1])))"
    child = subprocess.run([sys.executable, "-c", code, str(unused_tcp_port)], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]


async def check_health(port: int) -> None:
    readiness = _Readiness()
    settings = Settings(host="127.0.0.1", grpc_port=port)
    deps = GrpcDeps(settings=settings, models=readiness, decoder=None, metrics=Metrics(),  # type: ignore[arg-type]
                    vad_models=VadModelCache(settings.vad))
    server = await start_grpc_server(deps, settings)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status(service: str) -> int:
                return (await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)).status

            async def wait_for(expected: int) -> None:
                for _ in range(50):
                    if await status(SERVICE_NAME) == expected:
                        return
                    await asyncio.sleep(0.1)
                raise AssertionError(f"health never became {expected}")

            await wait_for(health_pb2.HealthCheckResponse.SERVING)
            assert await status("") == health_pb2.HealthCheckResponse.SERVING
            readiness.ready = False  # e.g. the engine heartbeat went stale
            await wait_for(health_pb2.HealthCheckResponse.NOT_SERVING)
            readiness.ready = True
            await wait_for(health_pb2.HealthCheckResponse.SERVING)
            server.set_serving(False)  # SIGTERM: at once, and for good
            await asyncio.sleep(0)
            assert await status("") == health_pb2.HealthCheckResponse.NOT_SERVING
            assert await status(SERVICE_NAME) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await server.stop(0)
