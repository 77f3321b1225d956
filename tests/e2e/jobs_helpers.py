"""Shared by the batch-job end-to-end tests: audio built from dev clips, a loopback webhook
receiver, and polling an operation until it is done."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import numpy as np
import soundfile as sf

from tests.conftest import SAMPLE_RATE, load_clip


def wav_bytes(samples: np.ndarray, rate: int = SAMPLE_RATE, fmt: str = "WAV") -> bytes:
    """16-bit WAV (or FLAC) of (n,) mono or (n, channels) samples."""
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format=fmt, subtype="PCM_16")
    return buf.getvalue()


def pcm16(samples: np.ndarray) -> np.ndarray:
    """Round to what a 16-bit file holds, so 'each channel alone' hears exactly the stereo file's samples."""
    return (np.clip(samples, -1, 32767 / 32768) * 32768).round().astype(np.int16).astype(np.float32) / 32768


def stereo(left_id: str, right_id: str) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A stereo WAV with one dev clip per channel (the shorter padded with silence), and each channel."""
    left, right = load_clip(left_id), load_clip(right_id)
    n = max(len(left), len(right))
    pair = np.zeros((n, 2), dtype=np.float32)
    pair[: len(left), 0] = left
    pair[: len(right), 1] = right
    pair = pcm16(pair)
    return wav_bytes(pair), pair[:, 0].copy(), pair[:, 1].copy()


def lro_body(audio: bytes | None = None, uri: str | None = None, **config: Any) -> dict[str, Any]:
    source = {"uri": uri} if uri is not None else {"content": base64.b64encode(audio or b"").decode()}
    return {"config": {"encoding": "AUTO", "languageCode": "en-US", **config}, "audio": source}


def wait_done(base_url: str, name: str, timeout: float = 300.0, on_poll: Any = None) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        op = httpx.get(f"{base_url}/v1/operations/{name}?extensions=true", timeout=30).json()
        if on_poll is not None:
            on_poll(op)
        if op.get("done"):
            return dict(op)
        time.sleep(0.2)
    raise AssertionError(f"operation {name} not done after {timeout}s: {op}")


def transcripts(op_or_response: dict[str, Any]) -> dict[int, str]:
    """channelTag -> transcript of a recognize response or a finished operation's response."""
    body = op_or_response.get("response", op_or_response)
    return {int(r.get("channelTag", 0)): r["alternatives"][0]["transcript"] for r in body["results"]}


def recognize_text(base_url: str, audio: bytes, **params: Any) -> dict[int, str]:
    r = httpx.post(f"{base_url}/v1/speech:recognize", params={"encoding": "AUTO", **params}, content=audio,
                   timeout=600)
    assert r.status_code == 200, r.text
    return transcripts(r.json())


@dataclass
class Delivery:
    body: bytes
    headers: dict[str, str]


@dataclass
class WebhookReceiver:
    """A loopback HTTP server recording every POST; the first `fail_first` answers are 500."""

    fail_first: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    answered: int = 0

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.deliveries.append(Delivery(body, {k.lower(): v for k, v in self.headers.items()}))
                receiver.answered += 1
                status = 500 if receiver.answered <= receiver.fail_first else 204
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(d.body) for d in self.deliveries]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
