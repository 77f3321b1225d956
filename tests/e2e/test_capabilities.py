"""Capabilities are enforced at admission, from ModelInfo, the same way on every surface.

For every family (Whisper tiny.en; WeNet, NeMo, Paraformer, Zipformer and Qwen2-Audio checkpoints
written by their reference implementations; the fake family) a real server is started, its `/v1/models` card says which per-request options
the model lacks, and a request using each of them is sent on every surface that can express it:
OpenAI REST, Google REST (its JSON body), gRPC Recognize, LongRunningRecognize (batch jobs),
the realtime WebSocket and Deepgram's /v1/listen. Each must be refused before any engine work,
with the one message the engine words for that option and model.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import soundfile as sf
import websockets

from protos.oasr.speech.v1 import speech_pb2 as pb
from protos.oasr.speech.v1 import speech_pb2_grpc
from tests.e2e.conftest import ServerProcess, start_server, start_wenet_streaming_server

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0


def _wav() -> bytes:
    t = np.arange(16000, dtype=np.float32) / 16000
    buf = io.BytesIO()
    sf.write(buf, (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


WAV = _wav()

# ------------------------------------------------------------------ servers, one per family


def _fake(tmp: Path) -> ServerProcess:
    from engine.models.fake import write_checkpoint

    return start_server(tmp, env={"OASR_CKPT_DIR": write_checkpoint(str(tmp / "fake"), "fake-asr")})


def _nemo(tmp: Path) -> ServerProcess:
    ckpt = tmp / "nemo"
    shutil.copytree(REPO / "tests" / "fixtures" / "nemo" / "hybrid_cache_aware", ckpt)
    return start_server(tmp, env={"OASR_CKPT_DIR": str(ckpt)})


def _fixture(name: str, **env: str) -> Callable[[Path], ServerProcess]:
    """A server on a committed reference-written checkpoint (tests/fixtures/NAME)."""
    return lambda tmp: start_server(tmp, env={"OASR_CKPT_DIR": str(REPO / "tests" / "fixtures" / name), **env})


FAMILIES: dict[str, Callable[[Path], ServerProcess]] = {
    "whisper": lambda tmp: start_server(tmp),
    "wenet": start_wenet_streaming_server,
    "nemo": _nemo,
    "paraformer": _fixture("paraformer/tiny"),
    "zipformer": _fixture("zipformer/tiny_streaming", OASR_NUM_THREADS="1"),
    "speechllm": _fixture("speechllm/qwen2_audio", OASR_SERVICE_MODE="offline"),
    "fake": _fake,
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = FAMILIES[request.param](tmp_path_factory.mktemp(f"caps-{request.param}"))
    yield srv
    srv.terminate()


def model_card(server: ServerProcess) -> dict[str, Any]:
    models = httpx.get(f"{server.base_url}/v1/models", timeout=TIMEOUT_S).json()["data"]
    return models[0]["info"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------ what each option looks like per surface


class Ask:
    """One option a model may lack, as each surface spells it (None: the surface cannot)."""

    def __init__(self, name: str, *, openai: dict[str, Any] | None = None, openai_path: str = "transcriptions",
                 google: dict[str, Any] | None = None, realtime: dict[str, Any] | None = None,
                 realtime_include: list[str] | None = None, listen: str | None = None):
        self.name, self.openai, self.openai_path, self.google = name, openai, openai_path, google
        self.realtime, self.realtime_include, self.listen = realtime, realtime_include, listen


ASKS: dict[str, Ask] = {
    "beam_size": Ask("beam_size", openai={"beam_size": "2"}, google={"decoding": {"beamSize": 2}}),
    "temperature": Ask("temperature", openai={"temperature": "0.5"}, google={"decoding": {"temperature": 0.5}}),
    "prompt": Ask("prompt", openai={"prompt": "hello"}, google={"decoding": {"prompt": "hello"}},
                  realtime={"prompt": "hello"}),
    "keywords": Ask("keywords", google={"speechContexts": [{"phrases": ["Kubernetes"]}]},
                    realtime={"keywords": ["Kubernetes"]}, listen="keywords=Kubernetes"),
    "logprobs": Ask("logprobs", openai={"include[]": "logprobs"},
                    realtime_include=["item.input_audio_transcription.logprobs"]),
    "language": Ask("language 'fr'", openai={"language": "fr"}, google={"languageCode": "fr-FR"},
                    realtime={"language": "fr"}, listen="language=fr"),
    "translate": Ask("task='translate'", openai={}, openai_path="translations",
                     google={"decoding": {"task": "TRANSLATE"}}),
    "word_timestamps": Ask("word_timestamps", openai={"response_format": "verbose_json",
                                                      "timestamp_granularities[]": "word"},
                           google={"enableWordTimeOffsets": True}),
    "stream_context": Ask("stream_context", google={"decoding": {"streamContext": {"left": 8, "chunk": 4, "right": 2}}},
                          realtime={"stream_context": [8, 4, 2]}),
    "top_k": Ask("top_k", google={"decoding": {"topK": 5}}),
    "top_p": Ask("top_p", google={"decoding": {"topP": 0.5}}),
    "seed": Ask("seed", google={"decoding": {"seed": 7}}),
    "max_new_tokens": Ask("max_new_tokens", google={"decoding": {"maxNewTokens": 8}}),
    "delay": Ask("delay", google={"decoding": {"delay": "low"}}, realtime={"delay": "low"}),
}


def lacked(card: dict[str, Any]) -> list[str]:
    """The options the model's card says it lacks (the ones a request can use)."""
    caps = card["capabilities"]
    out = []
    if caps["max_beam_size"] == 1:
        out.append("beam_size")
    flags = {"temperature": "sampling", "prompt": "prompt", "keywords": "keywords", "logprobs": "logprobs",
             "translate": "translate", "word_timestamps": "word_timestamps", "stream_context": "stream_context",
             "top_k": "sampling", "top_p": "sampling", "seed": "sampling", "max_new_tokens": "max_new_tokens",
             "delay": "delay"}
    out += [option for option, cap in flags.items() if not caps[cap]]
    if not caps["language"] and card["languages"] != ["fr"]:
        out.append("language")
    return out


# ------------------------------------------------------------------ the surfaces


def refused_openai(server: ServerProcess, ask: Ask) -> str:
    assert ask.openai is not None
    r = httpx.post(f"{server.base_url}/v1/audio/{ask.openai_path}", files={"file": ("a.wav", WAV, "audio/wav")},
                   data=ask.openai, timeout=TIMEOUT_S)
    assert r.status_code == 400, r.text
    return str(r.json()["error"]["message"])


def google_config(ask: Ask) -> dict[str, Any]:
    assert ask.google is not None
    return {"encoding": "LINEAR16", "sampleRateHertz": 16000, **ask.google}


def refused_google_rest(server: ServerProcess, ask: Ask) -> str:
    body = {"config": google_config(ask), "audio": {"content": base64.b64encode(WAV).decode()}}
    r = httpx.post(f"{server.base_url}/v1/speech:recognize", json=body, timeout=TIMEOUT_S)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    return str(error["message"])


def _proto_config(ask: Ask) -> pb.RecognitionConfig:
    from google.protobuf import json_format

    return json_format.ParseDict(google_config(ask), pb.RecognitionConfig())


def refused_grpc(server: ServerProcess, ask: Ask, *, job: bool) -> str:
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = speech_pb2_grpc.SpeechStub(channel)
        audio = pb.RecognitionAudio(content=WAV)
        with pytest.raises(grpc.RpcError) as err:
            if job:
                stub.LongRunningRecognize(pb.LongRunningRecognizeRequest(config=_proto_config(ask), audio=audio),
                                          timeout=TIMEOUT_S)
            else:
                stub.Recognize(pb.RecognizeRequest(config=_proto_config(ask), audio=audio), timeout=TIMEOUT_S)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    return str(err.value.details())


def refused_realtime(server: ServerProcess, ask: Ask) -> str:
    transcription: dict[str, Any] = {"model": "", **(ask.realtime or {})}
    session: dict[str, Any] = {"type": "transcription", "audio": {"input": {"transcription": transcription}}}
    if ask.realtime_include:
        session["include"] = ask.realtime_include

    async def run() -> dict[str, Any]:
        async with websockets.connect(server.ws_url + "/v1/realtime?intent=transcription", max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.update", "session": session}))
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
                if event["type"] in ("error", "session.updated"):
                    return event  # type: ignore[no-any-return]

    event = asyncio.run(run())
    assert event["type"] == "error", event
    return str(event["error"]["message"])


def refused_listen(server: ServerProcess, ask: Ask) -> str:
    """Deepgram's Error message carries the whole sentence (the close frame's reason is cut at
    RFC 6455's 123 bytes)."""
    async def run() -> str:
        url = f"{server.ws_url}/v1/listen?encoding=linear16&sample_rate=16000&{ask.listen}"
        messages: list[dict[str, Any]] = []
        async with websockets.connect(url) as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    messages.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        (error,) = messages
        assert error["type"] == "Error" and error["variant"] == "InvalidQuery", error
        return str(error["description"])

    return asyncio.run(run())


def test_every_lacked_capability_is_refused_on_every_surface_with_one_message(family_server: ServerProcess) -> None:
    card = model_card(family_server)
    options = lacked(card)
    assert options, f"{card['family']} lacks nothing: the table would test nothing"
    seen = 0
    for option in options:
        ask = ASKS[option]
        # the engine's one wording (engine/capabilities.py), whatever the surface
        expected = f"{ask.name} is not supported by the {card['family']} model {card['model']!r}: "
        messages: dict[str, str] = {}
        if ask.openai is not None:
            messages["openai"] = refused_openai(family_server, ask)
        if ask.google is not None:
            messages["google-rest"] = refused_google_rest(family_server, ask)
            messages["grpc"] = refused_grpc(family_server, ask, job=False)
            messages["jobs"] = refused_grpc(family_server, ask, job=True)
        if ask.realtime is not None or ask.realtime_include:
            messages["realtime"] = refused_realtime(family_server, ask)
        if ask.listen is not None:
            messages["listen"] = refused_listen(family_server, ask)
        assert messages, option
        for surface, message in messages.items():
            assert expected in message, (option, surface, message)
        worded = {m[m.index(expected):] for m in messages.values()}
        assert len(worded) == 1, (option, messages)  # the same sentence on every surface
        seen += len(messages)
    assert seen >= len(options)


def test_every_family_in_the_table_is_in_this_test() -> None:
    from engine.families import family_names

    assert sorted(FAMILIES) == sorted(family_names())


# ------------------------------------------------------------------ what clients send unasked


def test_the_client_sdks_default_requests_are_served_by_every_family(family_server: ServerProcess) -> None:
    """The official SDKs send fields at their defaults (the Google client's zero values, the
    openai SDK's `temperature=0`, Deepgram's live parameters): none may trip a capability refusal,
    on any family. A language goes only to a model that declares it."""
    import openai
    from deepgram import AsyncDeepgramClient, DeepgramClientEnvironment
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import speech_v1 as speech
    from google.cloud.speech_v1.services.speech.transports import SpeechGrpcTransport

    card = model_card(family_server)
    english = card["languages"] == ["en"] or card["capabilities"]["language"]
    language = {"language": "en"} if english else {}

    sdk = openai.OpenAI(base_url=family_server.base_url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT_S)
    out = sdk.audio.transcriptions.create(model="whisper-1", file=("a.wav", WAV), temperature=0.0, prompt="",
                                          response_format="json", **language)
    assert isinstance(out.text, str)

    config = speech.RecognitionConfig(encoding=speech.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=16000,
                                      max_alternatives=1, language_code="en-US" if english else "")
    audio = speech.RecognitionAudio(content=WAV)
    with grpc.insecure_channel(family_server.grpc_target) as channel:
        clients = {"grpc": speech.SpeechClient(transport=SpeechGrpcTransport(channel=channel)),
                   "rest": speech.SpeechClient(transport="rest", credentials=AnonymousCredentials(),
                                               client_options=ClientOptions(api_endpoint=family_server.base_url))}
        for transport, client in clients.items():
            response = client.recognize(config=config, audio=audio, timeout=TIMEOUT_S)
            assert isinstance(response, speech.RecognizeResponse), transport

    if not card["streaming_enabled"]:
        return

    async def listen() -> list[Any]:
        env = DeepgramClientEnvironment(base=family_server.base_url, production=family_server.ws_url,
                                        agent=family_server.ws_url, agent_rest=family_server.base_url)
        client = AsyncDeepgramClient(api_key="x", environment=env)
        received = []
        # what livekit-plugins-deepgram sends, less what needs a VAD model here (vad_events, endpointing)
        async with client.listen.v1.connect(model="nova-3", encoding="linear16", sample_rate="16000", channels="1",
                                            interim_results="true", punctuate="true", smart_format="false",
                                            profanity_filter="false", numerals="false", mip_opt_out="false",
                                            language="en-US" if english else "multi") as conn:
            await conn.send_media(WAV[44:])
            await conn.send_close_stream()
            async for message in conn:
                received.append(message)
        return received

    messages = asyncio.run(asyncio.wait_for(listen(), TIMEOUT_S))
    assert not [m for m in messages if m.type == "Error"], messages
    assert messages and messages[-1].type == "Metadata", messages
