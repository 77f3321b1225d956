"""gRPC transport of the oasr_server backend: Speech.Recognize and Speech.StreamingRecognize
(protos/oasr/speech/v1/speech.proto, Google Cloud Speech v1 shaped)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np

from benchmarks.asrbench.audio import SAMPLE_RATE, to_pcm16_bytes
from benchmarks.asrbench.backends.base import BackendError, StreamSession, Utterance

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Long-form WAVs are tens of MB; gRPC's default 4 MiB cap would reject them client-side."""
RPC_TIMEOUT_S = 1800.0


def _pb() -> tuple[Any, Any]:
    try:
        from protos.oasr.speech.v1 import speech_pb2, speech_pb2_grpc
    except ImportError as exc:
        raise BackendError(f"gRPC stubs not importable (run `make protos`): {exc}") from exc
    return speech_pb2, speech_pb2_grpc


class GrpcSpeechClient:
    """Thread-safe: one channel shared by all callers (grpc channels multiplex)."""

    def __init__(self, target: str, language_code: str) -> None:
        self.pb, pb_grpc = _pb()
        options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb_grpc.SpeechStub(self._channel)
        self._language = language_code

    def wait_ready(self, timeout_s: float) -> None:
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError as exc:
            raise BackendError(f"gRPC channel not ready within {timeout_s:.0f} s") from exc

    def _config(self, encoding: int, rate: int) -> Any:
        return self.pb.RecognitionConfig(encoding=encoding, sample_rate_hertz=rate, language_code=self._language)

    def transcribe(self, utt: Utterance) -> str:
        pb = self.pb
        request = pb.RecognizeRequest(config=self._config(pb.RecognitionConfig.WAV, 0),
                                      audio=pb.RecognitionAudio(content=utt.wav_bytes()))
        try:
            response = self._stub.Recognize(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise BackendError(f"gRPC {exc.code().name}: {exc.details()}") from exc
        return " ".join(r.alternatives[0].transcript.strip() for r in response.results if r.alternatives).strip()

    def open_stream(self) -> StreamSession:
        return _GrpcStream(self)

    def stream_call(self, requests: Iterator[Any]) -> Any:
        return self._stub.StreamingRecognize(requests, timeout=RPC_TIMEOUT_S)

    def close(self) -> None:
        self._channel.close()


class _GrpcStream(StreamSession):
    """Requests flow from a queue (config first, then PCM16 chunks); a reader thread records
    interim results as partials and finals as they come; the stream's end is the final."""

    def __init__(self, client: GrpcSpeechClient) -> None:
        super().__init__()
        pb = client.pb
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        config = pb.StreamingRecognitionConfig(
            config=client._config(pb.RecognitionConfig.LINEAR16, SAMPLE_RATE), interim_results=True)
        self._queue.put(pb.StreamingRecognizeRequest(streaming_config=config))
        self._pb = pb
        self._call = client.stream_call(self._requests())
        threading.Thread(target=self._read, name="grpc-stream", daemon=True).start()

    def _requests(self) -> Iterator[Any]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item

    def send(self, chunk: np.ndarray) -> None:
        self._queue.put(self._pb.StreamingRecognizeRequest(audio_content=to_pcm16_bytes(chunk)))

    def close_input(self) -> None:
        self._queue.put(None)

    def abort(self) -> None:
        self._call.cancel()

    def _read(self) -> None:
        finals: list[str] = []
        last_final_t: float | None = None
        try:
            for response in self._call:
                if response.error.code:
                    self._fail(f"stream error {response.error.code}: {response.error.message}")
                    return
                for result in response.results:
                    if not result.alternatives:
                        continue
                    text = result.alternatives[0].transcript.strip()
                    if result.is_final:
                        finals.append(text)
                        self._partial(" ".join(finals))
                        last_final_t = self.partials[-1][0]
                    else:
                        self._partial(" ".join([*finals, text]))
                        last_final_t = None
        except grpc.RpcError as exc:
            self._fail(f"gRPC {exc.code().name}: {exc.details()}")
            return
        # When the stream's last result is final, that result is the final transcript (not a partial).
        if last_final_t is not None:
            self.partials.pop()
        self._final(" ".join(t for t in finals if t), t=last_final_t)
