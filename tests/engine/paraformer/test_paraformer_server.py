"""End to end: a real server started on the FunASR-written SeACo Paraformer checkpoint serves the
offline surfaces: the OpenAI file API (verbose_json with word times, two uploads in one batch),
Google `speech:recognize` with word offsets, gRPC `Recognize`, with and without speech-context
phrases (SeACo hotwords); `/v1/models` shows the family and what it can do; a request it cannot
serve (a prompt) is refused with a 400; a realtime session (offline service mode: the committed
turn is transcribed whole) completes with the same transcript. Every transcript equals the in-process engine's on the
same PCM16 samples (the random model's words are meaningless but deterministic, so equality
checks the whole path), and the hotword-biased one differs from the plain one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from app.audio import pcm16_to_float
from engine import ASREngine, EngineConfig
from engine.types import DecodingOptions, RequestOutput
from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.audio_variants import encode_variant
from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_realtime_common import COMMITTED, TERMINAL, check_session_events, pcm16_at, sdk_session
from tests.engine.paraformer.conftest import SEACO_CKPT, clip, reference

pytestmark = pytest.mark.slow  # starts a real server

RATE = 16000  # Hz: sent as-is, so no resampler stands between the server and the in-process engine
CLIPS = ("mfa_her", "libri_61-70968-0000")
TIMEOUT_S = 120.0
HOTWORDS = tuple(reference()["seaco"]["hotwords"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(Path(tmp_path_factory.mktemp("paraformer-server")),
                       env={"OASR_CKPT_DIR": str(SEACO_CKPT), "OASR_PARAFORMER_LANGUAGES": "en"})  # fmt: skip
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def expected() -> dict[str, RequestOutput]:
    """The in-process engine's outputs on the PCM16 the clients send, with word times."""
    eng = ASREngine(EngineConfig(ckpt_dir=str(SEACO_CKPT)))
    try:
        audios = [pcm16_to_float(pcm16_at(clip(c), RATE)) for c in CLIPS]
        outs = eng.transcribe_outputs(audios, decoding=DecodingOptions(word_timestamps=True))
        (biased,) = eng.transcribe_outputs(audios[0], decoding=DecodingOptions(keywords=HOTWORDS))
    finally:
        eng.shutdown()
    assert all(o.finish_reason == "stop" and o.text for o in outs)
    assert biased.text and biased.tokens != outs[0].tokens
    return {**dict(zip(CLIPS, outs, strict=True)), "biased": biased}


def _wav(clip_id: str) -> bytes:
    return encode_variant(pcm16_to_float(pcm16_at(clip(clip_id), RATE)), RATE, "wav")


def test_models_card_declares_the_family(server: ServerProcess) -> None:
    (card,) = httpx.get(f"{server.base_url}/v1/models", timeout=TIMEOUT_S).json()["data"]
    info = card["info"]
    assert info["family"] == "paraformer" and info["streaming"] is False and info["decode_method"] == "paraformer"
    caps = info["capabilities"]
    assert caps["keywords"] is True and caps["max_beam_size"] == 1 and caps["word_timestamps"] is True
    assert info["contextual"] == "seaco" and info["languages"] == ["en"]


def test_openai_transcriptions_batched(server: ServerProcess, expected: dict[str, RequestOutput]) -> None:
    """Both clips posted at once (one engine batch): each text is the in-process engine's."""

    async def post_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=TIMEOUT_S) as c:
            return await asyncio.gather(*(
                c.post("/v1/audio/transcriptions", files={"file": (f"{cid}.wav", _wav(cid), "audio/wav")},
                       data={"model": "paraformer", "response_format": "verbose_json",
                             "timestamp_granularities[]": "word"})
                for cid in CLIPS
            ))  # fmt: skip

    for cid, r in zip(CLIPS, asyncio.run(post_all()), strict=True):
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["text"] == expected[cid].text
        words = expected[cid].words or []
        assert [w["word"] for w in body["words"]] == [w.word for w in words]
        assert [w["start"] for w in body["words"]] == pytest.approx([w.start for w in words])


def test_google_recognize_with_word_offsets(server: ServerProcess, expected: dict[str, RequestOutput]) -> None:
    cid = CLIPS[1]
    r = httpx.post(f"{server.base_url}/v1/speech:recognize", params={"encoding": "WAV", "enable_word_time_offsets": "true"},
                   content=_wav(cid), timeout=TIMEOUT_S)  # fmt: skip
    assert r.status_code == 200, r.text
    (alt,) = r.json()["results"][0]["alternatives"]
    assert alt["transcript"] == expected[cid].text
    assert [w["word"] for w in alt["words"]] == [w.word for w in expected[cid].words or []]


def test_grpc_recognize_with_and_without_hotwords(server: ServerProcess, expected: dict[str, RequestOutput]) -> None:
    """Google's speech_contexts phrases are the request's keywords: SeACo hotwords."""
    cid = CLIPS[0]

    async def call(phrases: tuple[str, ...]) -> pb.RecognizeResponse:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = speech_pb2_grpc.SpeechStub(channel)
            config = pb.RecognitionConfig(encoding=pb.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE,
                                          speech_contexts=[pb.SpeechContext(phrases=list(phrases))] if phrases else [])
            return await stub.Recognize(pb.RecognizeRequest(config=config, audio=pb.RecognitionAudio(
                content=pcm16_at(clip(cid), RATE))), timeout=TIMEOUT_S)  # fmt: skip

    assert asyncio.run(call(())).results[0].alternatives[0].transcript == expected[cid].text
    assert asyncio.run(call(HOTWORDS)).results[0].alternatives[0].transcript == expected["biased"].text


def test_a_prompt_is_refused(server: ServerProcess) -> None:
    r = httpx.post(f"{server.base_url}/v1/audio/transcriptions",
                   files={"file": ("a.wav", _wav(CLIPS[0]), "audio/wav")},
                   data={"model": "paraformer", "prompt": "curtain"}, timeout=TIMEOUT_S)  # fmt: skip
    assert r.status_code == 400 and "prompt" in r.text


def test_realtime_session_in_offline_mode(server: ServerProcess, expected: dict[str, RequestOutput]) -> None:
    cid = CLIPS[0]
    log = asyncio.run(sdk_session(server.ws_url, pcm16_at(clip(cid), RATE), rate=RATE))
    check_session_events(log.events)
    completed = [e for e in log.events if e["type"] == TERMINAL[0]]
    assert len(log.of_type(COMMITTED)) == 1 and len(completed) == 1
    assert completed[0]["transcript"] == expected[cid].text
