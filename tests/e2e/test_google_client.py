"""Google's own client library (google-cloud-speech) against a real server, over both of its
transports: REST (JSON over HTTP, `/v1/speech:*` and `/v1/operations/*`) and gRPC (service
`google.cloud.speech.v1.Speech`, `google.longrunning.Operations`). Recognize,
LongRunningRecognize polled to `.result()`, and StreamingRecognize; harmless hints are accepted,
a field that would change the transcript is refused by name.

The server pins its numeric path (OASR_QUANTIZATION=none) since transcripts are asserted.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import speech_v1 as speech
from google.cloud.speech_v1.services.speech.transports import SpeechGrpcTransport

from tests.e2e.conftest import ServerProcess, start_server
from tests.e2e.test_grpc import clip_bytes, clip_row, clip_samples, wer

CLIP = "libri_61-70968-0000"  # 4.9 s read speech
MAX_WER = 15.0  # percent; tiny.en is near 0 on this clip
TIMEOUT_S = 300.0  # a shared 2-core box under load; never unbounded
RATE = 16000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("google-client"), env={"OASR_QUANTIZATION": "none"})
    yield srv
    srv.terminate()


def rest_client(server: ServerProcess) -> speech.SpeechClient:
    return speech.SpeechClient(transport="rest", credentials=AnonymousCredentials(),
                               client_options=ClientOptions(api_endpoint=server.base_url))


def grpc_client(server: ServerProcess) -> speech.SpeechClient:
    channel = grpc.insecure_channel(server.grpc_target)
    return speech.SpeechClient(transport=SpeechGrpcTransport(channel=channel))


CLIENTS = {"rest": rest_client, "grpc": grpc_client}


def flac_config(**fields: object) -> speech.RecognitionConfig:
    return speech.RecognitionConfig(encoding=speech.RecognitionConfig.AudioEncoding.FLAC, language_code="en-US",
                                    **fields)


def reference() -> str:
    return str(clip_row(CLIP)["text"])


@pytest.mark.parametrize("transport", sorted(CLIENTS))
def test_recognize(server: ServerProcess, transport: str) -> None:
    client = CLIENTS[transport](server)
    # Hints Google's samples set routinely; none changes the transcript, so all are accepted.
    config = flac_config(use_enhanced=True, profanity_filter=False, enable_automatic_punctuation=True,
                         enable_word_time_offsets=True,
                         metadata=speech.RecognitionMetadata(
                             interaction_type=speech.RecognitionMetadata.InteractionType.DICTATION))
    response = client.recognize(config=config, audio=speech.RecognitionAudio(content=clip_bytes(CLIP)),
                                timeout=TIMEOUT_S)
    (result,) = response.results
    best = result.alternatives[0]
    assert wer(reference(), best.transcript) <= MAX_WER, best.transcript
    assert best.words and best.words[0].start_time.total_seconds() <= best.words[-1].end_time.total_seconds()
    assert response.request_id > 0  # Google's int64
    assert response.total_billed_time.total_seconds() == 5


@pytest.mark.parametrize("transport", sorted(CLIENTS))
def test_a_field_that_would_change_the_transcript_is_refused_by_name(server: ServerProcess, transport: str) -> None:
    client = CLIENTS[transport](server)
    config = flac_config(diarization_config=speech.SpeakerDiarizationConfig(enable_speaker_diarization=True,
                                                                            min_speaker_count=2))
    with pytest.raises(gexc.BadRequest, match="diarizationConfig"):
        client.recognize(config=config, audio=speech.RecognitionAudio(content=clip_bytes(CLIP)), timeout=TIMEOUT_S)
    with pytest.raises(gexc.BadRequest, match="profanityFilter"):
        client.recognize(config=flac_config(profanity_filter=True),
                         audio=speech.RecognitionAudio(content=clip_bytes(CLIP)), timeout=TIMEOUT_S)


@pytest.mark.parametrize("transport", sorted(CLIENTS))
def test_long_running_recognize_polls_to_its_result(server: ServerProcess, transport: str) -> None:
    client = CLIENTS[transport](server)
    operation = client.long_running_recognize(config=flac_config(),
                                              audio=speech.RecognitionAudio(content=clip_bytes(CLIP)),
                                              timeout=TIMEOUT_S)
    response = operation.result(timeout=TIMEOUT_S)  # polls GetOperation until done
    assert operation.done()
    (result,) = response.results
    assert wer(reference(), result.alternatives[0].transcript) <= MAX_WER, result.alternatives[0].transcript
    assert response.request_id > 0
    assert operation.metadata.progress_percent == 100


@pytest.mark.parametrize("transport", ["grpc"])  # Google's REST transport has no StreamingRecognize
def test_streaming_recognize(server: ServerProcess, transport: str) -> None:
    client = CLIENTS[transport](server)
    pcm = (clip_samples(CLIP, RATE) * 32767).clip(-32768, 32767).astype("<i2").tobytes()
    chunk = RATE * 2 // 10  # 100 ms
    config = speech.StreamingRecognitionConfig(config=speech.RecognitionConfig(
        encoding=speech.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=RATE, language_code="en-US"))
    requests = (speech.StreamingRecognizeRequest(audio_content=pcm[i:i + chunk]) for i in range(0, len(pcm), chunk))
    responses = list(client.streaming_recognize(config=config, requests=requests, timeout=TIMEOUT_S))
    finals = [r.alternatives[0].transcript for resp in responses for r in resp.results if r.is_final]
    assert wer(reference(), " ".join(finals)) <= MAX_WER, finals
    assert all(resp.request_id > 0 for resp in responses)
