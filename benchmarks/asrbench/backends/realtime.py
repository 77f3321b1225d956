"""Live streaming over `/v1/realtime` (the OpenAI realtime transcription WebSocket protocol).

Per session: `session.update` (GA transcription session, `audio/pcm` at 24 kHz as the protocol
specifies, turn detection none or server VAD), then `input_audio_buffer.append` events with
base64 PCM16, then `input_audio_buffer.commit` at the end. Transcription `delta` events are
partials (appended, or the whole text in `text` when the server revised what it had sent); the final is the moment every committed item has its `completed` transcript and
the server has answered our commit (a `committed` item, or `input_audio_buffer_commit_empty`
when server VAD had already closed every turn). With turn detection none (the default) a
session is exactly one item, so the final is unambiguous.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from typing import Any

import numpy as np
import soxr

from benchmarks.asrbench.audio import SAMPLE_RATE, to_pcm16_bytes
from benchmarks.asrbench.backends.base import StreamSession

logger = logging.getLogger(__name__)

WIRE_RATE = 24_000
"""Hz; OpenAI's realtime `audio/pcm` format is 24 kHz mono PCM16."""
EMPTY_COMMIT_CODES = ("input_audio_buffer_commit_empty",)


def realtime_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1).rstrip("/") + \
        "/v1/realtime?intent=transcription"


def append_events(audio: np.ndarray, chunk_s: float) -> list[str]:
    """`audio` (16 kHz) as the `input_audio_buffer.append` events (JSON text, 24 kHz PCM16) of one
    `chunk_s` each, encoded ahead of time for `RealtimeStream.send_event`: a load generator's
    sessions then spend their CPU on sending only, not on resampling and encoding every chunk while
    the server they measure shares the machine."""
    wire = soxr.resample(audio, SAMPLE_RATE, WIRE_RATE).astype(np.float32)
    step = round(chunk_s * WIRE_RATE)
    return [_append_event(wire[off : off + step]) for off in range(0, wire.size, step)]


def _append_event(wire: np.ndarray) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(to_pcm16_bytes(wire)).decode("ascii")})


def probe(base_url: str, timeout_s: float = 10.0) -> str | None:
    """None when a realtime session can be opened, else why not."""
    from websockets.sync.client import connect

    try:
        with connect(realtime_url(base_url), open_timeout=timeout_s, close_timeout=2) as ws:
            event = json.loads(ws.recv(timeout=timeout_s))
            if event.get("type") == "error":
                return f"server answered error: {event.get('error')}"
    except Exception as exc:  # any failure to open is the reason streaming is unsupported
        return f"{type(exc).__name__}: {exc}"
    return None


class RealtimeStream(StreamSession):
    def __init__(self, base_url: str, model: str, turn_detection: str, api_key: str = "") -> None:
        super().__init__()
        from websockets.sync.client import connect

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._ws = connect(realtime_url(base_url), additional_headers=headers, max_size=None, open_timeout=30)
        self._resampler = soxr.ResampleStream(SAMPLE_RATE, WIRE_RATE, 1, dtype="float32")
        self._lock = threading.Lock()
        self._items: list[str] = []  # committed item ids, in order
        self._completed: dict[str, str] = {}
        self._deltas: dict[str, str] = {}
        self.joined: dict[str, str] = {}  # item -> its `delta`s concatenated, as a stock OpenAI client joins them
        self.completed: dict[str, str] = {}  # item -> its `completed` transcript
        self.speech_end_ms: dict[str, int] = {}  # item -> where the server VAD heard its speech end
        self.completed_t: dict[str, float] = {}  # item -> perf_counter() at its `completed` transcript
        self._closing = False
        self._commit_answered = False
        audio_input: dict[str, Any] = {"format": {"type": "audio/pcm", "rate": WIRE_RATE},
                                       "turn_detection": {"type": "server_vad"} if turn_detection == "server_vad"
                                       else None}
        if model:
            audio_input["transcription"] = {"model": model, "language": "en"}
        self._send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": audio_input}}})
        threading.Thread(target=self._read, name="realtime", daemon=True).start()

    def _send(self, event: dict[str, Any]) -> None:
        self._ws.send(json.dumps(event))

    def send(self, chunk: np.ndarray) -> None:
        self._append(self._resampler.resample_chunk(chunk, last=False))

    def send_event(self, event_text: str) -> None:
        """Send one event already encoded as JSON text (`append_events`)."""
        self._ws.send(event_text)

    def _append(self, wire: np.ndarray) -> None:
        if wire.size:
            self._ws.send(_append_event(wire))

    def close_input(self) -> None:
        self._append(self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
        with self._lock:
            self._closing = True
        self._send({"type": "input_audio_buffer.commit"})

    def abort(self) -> None:
        self._ws.close()

    def turn_ends(self) -> list[tuple[float | None, float]]:
        """Each item's (speech end in session audio seconds, or None where the client's commit
        ended it; perf_counter() of its completed transcript), in item order."""
        return [(self.speech_end_ms[i] / 1000 if i in self.speech_end_ms else None, self.completed_t[i])
                for i in self._items if i in self.completed_t]

    def _text_so_far(self) -> str:
        return " ".join(self._completed.get(i, self._deltas.get(i, "")).strip() for i in self._items).strip()

    def _maybe_final(self) -> None:
        if self._closing and self._items and all(i in self._completed for i in self._items) and self._commit_answered:
            self._final(self._text_so_far())
            self._ws.close()

    def _read(self) -> None:
        try:
            for raw in self._ws:
                event = json.loads(raw)
                kind = event.get("type", "")
                with self._lock:
                    if kind == "input_audio_buffer.committed":
                        if event.get("item_id") not in self._items:
                            self._items.append(event["item_id"])
                        if self._closing:
                            self._commit_answered = True
                    elif kind == "input_audio_buffer.speech_stopped":
                        # speech_end_ms (our extension) is where speech ended; audio_end_ms adds padding
                        self.speech_end_ms[event.get("item_id", "")] = int(
                            event.get("speech_end_ms", event.get("audio_end_ms", 0)))
                    elif kind == "conversation.item.input_audio_transcription.delta":
                        item = event.get("item_id", "")
                        if item not in self._items:
                            self._items.append(item)
                        self.joined[item] = self.joined.get(item, "") + event.get("delta", "")
                        if event.get("text") is not None:  # the server revised text it had sent: the whole text
                            self._deltas[item] = event["text"]
                        else:
                            self._deltas[item] = self._deltas.get(item, "") + event.get("delta", "")
                        if event.get("delta"):  # a partial is new text a stock client shows, not an empty event
                            self._partial(self._text_so_far())
                    elif kind == "conversation.item.input_audio_transcription.completed":
                        item = event.get("item_id", "")
                        if item not in self._items:
                            self._items.append(item)
                        self._completed[item] = event.get("transcript", "")
                        self.completed[item] = event.get("transcript", "")
                        self.completed_t[item] = time.perf_counter()
                        if not self._closing:
                            self._partial(self._text_so_far())
                    elif kind == "conversation.item.input_audio_transcription.failed":
                        err = event.get("error") or {}
                        self._fail(f"transcription failed: {err.get('message', err)}")
                        return
                    elif kind == "error":
                        err = event.get("error") or {}
                        if self._closing and err.get("code") in EMPTY_COMMIT_CODES:
                            self._commit_answered = True  # the VAD had already committed everything
                        else:
                            self._fail(f"realtime error: {err.get('message', err)}")
                            return
                    self._maybe_final()
                    if self._done_flag():
                        return
        except Exception as exc:  # connection dropped: the session failed unless it had finished
            if not self._done_flag():
                self._fail(f"realtime connection: {type(exc).__name__}: {exc}")
            return
        if not self._done_flag():
            if self._closing and all(i in self._completed for i in self._items):
                self._final(self._text_so_far())
            else:
                self._fail("realtime connection closed before the final transcript")

    def _done_flag(self) -> bool:
        return self.final_t is not None or self.error is not None
